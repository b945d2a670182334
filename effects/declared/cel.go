package declared

import (
	"github.com/google/cel-go/cel"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// condEnvs are the CEL environments of conditions: an answer's (outcome
// rules, a look-up's items, found and missing) and a look-up item's
// (match), which adds item.
var condEnvs = func() [2]*cel.Env {
	opts := []cel.EnvOption{
		cel.Variable("status", cel.IntType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("body", cel.DynType),
		cel.Variable("args", cel.DynType),
		cel.Variable("provider_key", cel.StringType),
		// JSON numbers are doubles to CEL: body.amount == 100 must hold
		// for 100.0.
		cel.CrossTypeNumericComparisons(true),
	}
	answer, err := cel.NewEnv(opts...)
	if err != nil {
		panic(err) // a broken declaration above, not user input
	}
	item, err := answer.Extend(cel.Variable("item", cel.DynType))
	if err != nil {
		panic(err)
	}
	return [2]*cel.Env{answer, item}
}()

// compileCondition compiles expr in the answer's environment (or the
// item's), refusing one whose type is not want (or dyn, checked when it
// runs).
func compileCondition(expr string, withItem bool, want *cel.Type) (*effectfile.Condition, error) {
	env := condEnvs[0]
	if withItem {
		env = condEnvs[1]
	}
	return effectfile.CompileIn(env, expr, want)
}

// answerVars are the variables of an evaluation.
type answerVars struct {
	status      int
	headers     map[string]string
	body        any
	args        any
	providerKey string
}

func (v *answerVars) activation(item any) map[string]any {
	m := map[string]any{
		"status":       int64(v.status),
		"headers":      v.headers,
		"body":         v.body,
		"args":         v.args,
		"provider_key": v.providerKey,
	}
	if item != nil {
		m["item"] = item
	}
	return m
}

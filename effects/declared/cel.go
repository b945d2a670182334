package declared

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
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

// condition is a compiled CEL expression.
type condition struct {
	expr string
	prg  cel.Program
	// usesProviderKey is true when the expression reads provider_key.
	usesProviderKey bool
}

// compileCondition compiles expr in the answer's environment (or the
// item's), refusing one whose type is not want (or dyn, checked when it
// runs).
func compileCondition(expr string, withItem bool, want *cel.Type) (*condition, error) {
	env := condEnvs[0]
	if withItem {
		env = condEnvs[1]
	}
	return compileIn(env, expr, want)
}

// compileIn compiles expr in env, refusing one whose type is not want (or
// dyn, checked when it runs).
func compileIn(env *cel.Env, expr string, want *cel.Type) (*condition, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, fmt.Errorf("an empty CEL expression")
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("CEL: %s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	out := ast.OutputType()
	if !out.IsExactType(want) && !out.IsExactType(types.DynType) && !(want.Kind() == types.ListKind && out.Kind() == types.ListKind) {
		return nil, fmt.Errorf("CEL type error: %q returns %s, expected %s", expr, out, want)
	}
	prg, err := env.Program(ast)
	if err != nil {
		return nil, fmt.Errorf("CEL: %w", err)
	}
	c := &condition{expr: expr, prg: prg}
	for _, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name == "provider_key" {
			c.usesProviderKey = true
		}
	}
	return c, nil
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

// evalBool evaluates a boolean condition.
func (c *condition) evalBool(act map[string]any) (bool, error) {
	out, _, err := c.prg.Eval(act)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%q returned %T, not a bool", c.expr, out.Value())
	}
	return b, nil
}

// evalList evaluates a condition that must give a list.
func (c *condition) evalList(act map[string]any) ([]any, error) {
	out, _, err := c.prg.Eval(act)
	if err != nil {
		return nil, err
	}
	if list, ok := out.Value().([]any); ok {
		return list, nil
	}
	lister, ok := out.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("%q gave %s, not a list", c.expr, out.Type())
	}
	// A list the expression built (a filter, a literal): its elements are
	// CEL values, whose Value is the Go value they wrap.
	n, _ := lister.Size().Value().(int64)
	list := make([]any, 0, n)
	for i := range n {
		list = append(list, lister.Get(types.Int(i)).Value())
	}
	return list, nil
}

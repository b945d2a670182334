package effectfile

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
)

// Condition is a compiled CEL expression.
type Condition struct {
	Expr string
	prg  cel.Program
	// UsesProviderKey is true when the expression reads provider_key.
	UsesProviderKey bool
}

// CompileIn compiles expr in env, refusing one whose type is not want (or
// dyn, checked when it runs).
func CompileIn(env *cel.Env, expr string, want *cel.Type) (*Condition, error) {
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
	c := &Condition{Expr: expr, prg: prg}
	for _, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name == "provider_key" {
			c.UsesProviderKey = true
		}
	}
	return c, nil
}

// EvalBool evaluates a boolean condition.
func (c *Condition) EvalBool(act map[string]any) (bool, error) {
	out, _, err := c.prg.Eval(act)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%q returned %T, not a bool", c.Expr, out.Value())
	}
	return b, nil
}

// EvalList evaluates a condition that must give a list.
func (c *Condition) EvalList(act map[string]any) ([]any, error) {
	out, _, err := c.prg.Eval(act)
	if err != nil {
		return nil, err
	}
	if list, ok := out.Value().([]any); ok {
		return list, nil
	}
	lister, ok := out.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("%q gave %s, not a list", c.Expr, out.Type())
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

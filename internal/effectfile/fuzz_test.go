package effectfile

import (
	"strings"
	"testing"
)

// FuzzTemplate parses any template text and renders it with arguments
// that may hold anything: it never panics, a parsed template renders or
// refuses, and a literal brace written {{ or }} comes out single.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"{args.a}", "x{args.a.b}y", "{{literal}}", "{provider_key}", "{env.K}", "{args}", "{args.0}", "{", "}", "{args.}", "{{{args.a}}}"} {
		f.Add(s, `v`)
	}
	f.Fuzz(func(t *testing.T, tmpl, value string) {
		tp, err := ParseTemplate(tmpl, true)
		if err != nil {
			return
		}
		rc := &RenderCtx{
			Args:        map[string]any{"a": value, "b": map[string]any{"c": value}, "0": value},
			Env:         map[string]string{"K": "secret"},
			ProviderKey: "pk",
			CreatedAt:   "2026-01-01T00:00:00Z",
		}
		s, ok, err := tp.RenderString(rc)
		if err != nil || !ok {
			return
		}
		if len(tp.Placeholders()) == 0 && s != strings.NewReplacer("{{", "{", "}}", "}").Replace(tmpl) {
			t.Fatalf("literal %q rendered as %q", tmpl, s)
		}
		if _, _, err := tp.RenderValue(rc); err != nil {
			t.Fatalf("RenderValue failed where RenderString did not: %v", err)
		}
	})
}

package declared

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// schema checks and compiles the args' schema. Its shape's problems are
// reported together; the schema is compiled only when there is none.
func (l *loader) schema(e *Effect, m effectfile.Map, fail effectfile.FailFunc) error {
	var errs effectfile.FileErrors
	if t, _ := m.Get("type"); t != "object" {
		errs.Add(fail("args.type", "the top level must be a plain type: object"))
	}
	for _, kw := range []string{"oneOf", "anyOf", "allOf", "not", "if", "then", "else"} {
		if _, ok := m.Get(kw); ok {
			errs.Add(fail("args."+kw, "not at the top level: hosts such as Anthropic's API refuse a tool whose input schema has a combinator there, and then every tool of the server fails"))
		}
	}
	if s, ok := m.Get("$schema"); ok && s != "https://json-schema.org/draft/2020-12/schema" {
		errs.Add(fail("args.$schema", "only JSON Schema 2020-12 (https://json-schema.org/draft/2020-12/schema)"))
	}
	if ref := remoteRef(m); ref != "" {
		errs.Add(fail("args", "$ref %q: only local references (#/$defs/...) are allowed", ref))
	}
	if len(errs) > 0 {
		return errs.Err()
	}
	doc := effectfile.Plain(m)
	raw, err := effectfile.MarshalJSON(doc)
	if err != nil {
		return fail("args", "not representable as JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(effectfile.NoLoader{})
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fail("args", "%v", err)
	}
	if err := c.AddResource("args.json", parsed); err != nil {
		return fail("args", "%v", err)
	}
	sch, err := c.Compile("args.json")
	if err != nil {
		return fail("args", "not a valid JSON Schema 2020-12: %s", effectfile.FirstLine(err.Error()))
	}
	e.schema, e.schemaJSON = sch, raw
	return nil
}

// remoteRef returns the first $ref that is not local, or "".
func remoteRef(v any) string {
	switch v := v.(type) {
	case effectfile.Map:
		for _, kv := range v {
			if kv.Key == "$ref" || kv.Key == "$dynamicRef" {
				if s, ok := kv.Value.(string); ok && !strings.HasPrefix(s, "#") {
					return s
				}
			}
			if r := remoteRef(kv.Value); r != "" {
				return r
			}
		}
	case []any:
		for _, item := range v {
			if r := remoteRef(item); r != "" {
				return r
			}
		}
	}
	return ""
}

// schemaHas reports whether path names a property of the schema: through
// properties for objects and items (or prefixItems) for arrays.
func schemaHas(schemaJSON json.RawMessage, path []string) bool {
	var node any
	if json.Unmarshal(schemaJSON, &node) != nil {
		return false
	}
	root := node
	for _, seg := range path {
		m, ok := node.(map[string]any)
		if !ok {
			return false
		}
		if ref, ok := m["$ref"].(string); ok && strings.HasPrefix(ref, "#/") {
			if target, ok := effectfile.ResolvePointer(root, ref[1:]); ok {
				m, _ = target.(map[string]any)
			}
		}
		if props, ok := m["properties"].(map[string]any); ok {
			if next, ok := props[seg]; ok {
				node = next
				continue
			}
		}
		if items, ok := m["items"].(map[string]any); ok {
			if _, err := fmt.Sscanf(seg, "%d", new(int)); err == nil {
				node = items
				continue
			}
		}
		return false
	}
	return true
}

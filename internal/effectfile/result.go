package effectfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ResultField is one member of a result mapping: a name and a JSON pointer
// into the answer.
type ResultField struct {
	Name    string
	Pointer string
}

// ParseResult checks a result mapping, m's member field: names to JSON
// pointers. Every problem is reported, each through fail.
func ParseResult(m Map, field string, fail FailFunc) ([]ResultField, error) {
	v, ok := m.Get(field)
	if !ok {
		return nil, nil
	}
	rm, ok := v.(Map)
	if !ok {
		return nil, fail(field, "must map names to JSON pointers such as /id")
	}
	var errs FileErrors
	var out []ResultField
	for _, kv := range rm {
		p, _ := kv.Value.(string)
		if p != "" && !strings.HasPrefix(p, "/") {
			errs.Add(fail(field+"."+kv.Key, "a JSON pointer starts with /, such as /id"))
			continue
		}
		out = append(out, ResultField{Name: kv.Key, Pointer: p})
	}
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	return out, nil
}

// Extract builds a result from JSON pointers into v, at most ResultMax
// bytes. Numbers keep their exact text: v is decoded again from its JSON
// with json.Number. Scrubbing secrets from it is the caller's.
func Extract(fields []ResultField, v any) (json.RawMessage, error) {
	if len(fields) == 0 {
		return json.RawMessage(`{}`), nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("the answer is not JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the answer is not JSON")
	}
	out := Map{}
	for _, f := range fields {
		val, ok := ResolvePointer(doc, f.Pointer)
		if !ok {
			return nil, fmt.Errorf("result %s: %s is not in the answer", f.Name, f.Pointer)
		}
		out = append(out, KV{Key: f.Name, Value: val})
	}
	b, err := MarshalJSON(out)
	if err != nil {
		return nil, err
	}
	if len(b) > ResultMax {
		return nil, fmt.Errorf("the result is %d bytes, more than %d", len(b), ResultMax)
	}
	return json.RawMessage(b), nil
}

// ResolvePointer resolves an RFC 6901 JSON pointer.
func ResolvePointer(v any, pointer string) (any, bool) {
	if pointer == "" {
		return v, true
	}
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch node := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = node[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

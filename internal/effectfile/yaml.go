package effectfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
)

// Map is a JSON object whose members keep the order of the file.
type Map []KV

// KV is one member of a Map.
type KV struct {
	Key   string
	Value any
}

// MarshalJSON implements json.Marshaler, keeping the members' order.
func (m Map) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, kv := range m {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(kv.Key)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		v, err := MarshalJSON(kv.Value)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// Get returns the member key's value, and whether m has it.
func (m Map) Get(key string) (any, bool) {
	for _, kv := range m {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Without returns m without its member key.
func (m Map) Without(key string) Map {
	out := make(Map, 0, len(m))
	for _, kv := range m {
		if kv.Key != key {
			out = append(out, kv)
		}
	}
	return out
}

// Ordered converts the YAML decoder's values: yaml.MapSlice into
// Map, recursively; other values as they are.
func Ordered(v any) any {
	switch v := v.(type) {
	case yaml.MapSlice:
		m := make(Map, 0, len(v))
		for _, item := range v {
			m = append(m, KV{Key: fmt.Sprint(item.Key), Value: Ordered(item.Value)})
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = Ordered(item)
		}
		return out
	}
	return v
}

// Plain converts an Map tree into maps, for JSON Schema.
func Plain(v any) any {
	switch v := v.(type) {
	case Map:
		m := make(map[string]any, len(v))
		for _, kv := range v {
			m[kv.Key] = Plain(kv.Value)
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = Plain(item)
		}
		return out
	}
	return v
}

// AsInt reads a YAML or JSON number that is a whole number.
func AsInt(v any) (int, bool) {
	switch v := v.(type) {
	case uint64:
		return int(v), true
	case int64:
		return int(v), true
	case int:
		return v, true
	case float64:
		if v == float64(int(v)) {
			return int(v), true
		}
	}
	return 0, false
}

// MergePatch applies an RFC 7396 merge patch to a preset's declaration:
// members of the patch replace the preset's, null removes one, mappings
// merge.
func MergePatch(target, patch Map) (Map, error) {
	out := append(Map{}, target...)
	for _, kv := range patch {
		i := slices.IndexFunc(out, func(t KV) bool { return t.Key == kv.Key })
		switch {
		case kv.Value == nil:
			if i >= 0 {
				out = slices.Delete(out, i, i+1)
			}
		case i >= 0:
			pm, pok := kv.Value.(Map)
			tm, tok := out[i].Value.(Map)
			if pok && tok {
				merged, err := MergePatch(tm, pm)
				if err != nil {
					return nil, err
				}
				out[i].Value = merged
			} else {
				out[i].Value = kv.Value
			}
		default:
			out = append(out, kv)
		}
	}
	return out, nil
}

// yamlError turns the parser's error into a FileError with its line.
func yamlError(file string, err error) *FileError {
	var syntax yaml.Error
	if errors.As(err, &syntax) {
		line := 0
		if tok := syntax.GetToken(); tok != nil && tok.Position != nil {
			line = tok.Position.Line
		}
		return &FileError{File: file, Line: line, Err: errors.New(strings.TrimSpace(FirstLine(syntax.GetMessage())))}
	}
	return &FileError{File: file, Err: errors.New(FirstLine(err.Error()))}
}

// FirstLine returns s's first line, trimmed: a parser's message without
// its excerpt of the file.
func FirstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

package declared

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
)

// orderedMap is a JSON object whose members keep the order of the file.
type orderedMap []orderedKV

type orderedKV struct {
	key   string
	value any
}

// MarshalJSON implements json.Marshaler, keeping the members' order.
func (m orderedMap) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, kv := range m {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(kv.key)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		v, err := marshalJSON(kv.value)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func (m orderedMap) get(key string) (any, bool) {
	for _, kv := range m {
		if kv.key == key {
			return kv.value, true
		}
	}
	return nil, false
}

func (m orderedMap) without(key string) orderedMap {
	out := make(orderedMap, 0, len(m))
	for _, kv := range m {
		if kv.key != key {
			out = append(out, kv)
		}
	}
	return out
}

// ordered converts the YAML decoder's values: yaml.MapSlice into
// orderedMap, recursively; other values as they are.
func ordered(v any) any {
	switch v := v.(type) {
	case yaml.MapSlice:
		m := make(orderedMap, 0, len(v))
		for _, item := range v {
			m = append(m, orderedKV{key: fmt.Sprint(item.Key), value: ordered(item.Value)})
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = ordered(item)
		}
		return out
	}
	return v
}

// plain converts an orderedMap tree into maps, for JSON Schema.
func plain(v any) any {
	switch v := v.(type) {
	case orderedMap:
		m := make(map[string]any, len(v))
		for _, kv := range v {
			m[kv.key] = plain(kv.value)
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = plain(item)
		}
		return out
	}
	return v
}

// asInt reads a YAML or JSON number that is a whole number.
func asInt(v any) (int, bool) {
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

// mergePatch applies an RFC 7396 merge patch to a preset's declaration:
// members of the patch replace the preset's, null removes one, mappings
// merge.
func mergePatch(target, patch orderedMap) (orderedMap, error) {
	out := append(orderedMap{}, target...)
	for _, kv := range patch {
		i := slices.IndexFunc(out, func(t orderedKV) bool { return t.key == kv.key })
		switch {
		case kv.value == nil:
			if i >= 0 {
				out = slices.Delete(out, i, i+1)
			}
		case i >= 0:
			pm, pok := kv.value.(orderedMap)
			tm, tok := out[i].value.(orderedMap)
			if pok && tok {
				merged, err := mergePatch(tm, pm)
				if err != nil {
					return nil, err
				}
				out[i].value = merged
			} else {
				out[i].value = kv.value
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
		return &FileError{File: file, Line: line, Err: errors.New(strings.TrimSpace(firstLine(syntax.GetMessage())))}
	}
	return &FileError{File: file, Err: errors.New(firstLine(err.Error()))}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

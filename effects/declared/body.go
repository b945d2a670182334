package declared

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
)

// bodyNode is a declared body, compiled: objects keep their members'
// order, strings are templates, other scalars are sent as written.
type bodyNode struct {
	members []bodyMember // object
	items   []*bodyNode  // array
	isObj   bool
	isArr   bool
	tmpl    *template // string
	scalar  any       // number, bool or null
}

type bodyMember struct {
	key  string
	node *bodyNode
}

// compileBody compiles a declared body (as decoded from the file: maps
// with ordered keys come as orderedMap).
func compileBody(v any, lookup bool) (*bodyNode, error) {
	switch v := v.(type) {
	case orderedMap:
		n := &bodyNode{isObj: true}
		for _, kv := range v {
			child, err := compileBody(kv.value, lookup)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", kv.key, err)
			}
			n.members = append(n.members, bodyMember{key: kv.key, node: child})
		}
		return n, nil
	case []any:
		n := &bodyNode{isArr: true}
		for i, item := range v {
			child, err := compileBody(item, lookup)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			n.items = append(n.items, child)
		}
		return n, nil
	case string:
		t, err := parseTemplate(v, lookup)
		if err != nil {
			return nil, err
		}
		return &bodyNode{tmpl: t}, nil
	}
	return &bodyNode{scalar: v}, nil
}

// placeholders returns every placeholder of the body.
func (n *bodyNode) placeholders() []*placeholder {
	if n == nil {
		return nil
	}
	var phs []*placeholder
	switch {
	case n.tmpl != nil:
		phs = n.tmpl.placeholders()
	case n.isObj:
		for _, m := range n.members {
			phs = append(phs, m.node.placeholders()...)
		}
	case n.isArr:
		for _, item := range n.items {
			phs = append(phs, item.placeholders()...)
		}
	}
	return phs
}

// render fills the body for one attempt. ok is false when the node is one
// placeholder whose argument is absent: its member or element is dropped.
func (n *bodyNode) render(rc *renderCtx) (v any, ok bool, err error) {
	switch {
	case n.tmpl != nil:
		return n.tmpl.renderValue(rc)
	case n.isObj:
		out := orderedMap{}
		for _, m := range n.members {
			child, ok, err := m.node.render(rc)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out = append(out, orderedKV{key: m.key, value: child})
			}
		}
		return out, true, nil
	case n.isArr:
		out := []any{}
		for _, item := range n.items {
			child, ok, err := item.render(rc)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out = append(out, child)
			}
		}
		return out, true, nil
	}
	return n.scalar, true, nil
}

// marshalJSON encodes v without escaping <, > and &: a provider receives
// the text the agent wrote.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Form array styles (form_arrays).
const (
	formArraysIndexed  = "indexed"  // a[0]=x&a[1]=y, Stripe's
	formArraysBrackets = "brackets" // a[]=x&a[]=y
	formArraysRepeat   = "repeat"   // a=x&a=y, Twilio's
)

// formEncode flattens a rendered body into form fields: nested objects as
// a[b]=x, arrays per style, scalars as their JSON text (strings bare).
func formEncode(v any, style string) string {
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case orderedMap:
			for _, kv := range v {
				walk(formKey(prefix, kv.key), kv.value)
			}
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(formKey(prefix, k), v[k])
			}
		case []any:
			for i, item := range v {
				switch style {
				case formArraysBrackets:
					walk(prefix+"[]", item)
				case formArraysRepeat:
					walk(prefix, item)
				default:
					walk(prefix+"["+strconv.Itoa(i)+"]", item)
				}
			}
		case nil:
			out = append(out, url.QueryEscape(prefix)+"=")
		default:
			out = append(out, url.QueryEscape(prefix)+"="+url.QueryEscape(text(v)))
		}
	}
	walk("", v)
	var buf bytes.Buffer
	for i, s := range out {
		if i > 0 {
			buf.WriteByte('&')
		}
		buf.WriteString(s)
	}
	return buf.String()
}

func formKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "[" + key + "]"
}

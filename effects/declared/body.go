package declared

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// bodyNode is a declared body, compiled: objects keep their members'
// order, strings are templates, other scalars are sent as written.
type bodyNode struct {
	members []bodyMember // object
	items   []*bodyNode  // array
	isObj   bool
	isArr   bool
	tmpl    *effectfile.Template // string
	scalar  any                  // number, bool or null
}

type bodyMember struct {
	key  string
	node *bodyNode
}

// compileBody compiles a declared body (as decoded from the file: maps
// with ordered keys come as effectfile.Map).
func compileBody(v any, lookup bool) (*bodyNode, error) {
	switch v := v.(type) {
	case effectfile.Map:
		n := &bodyNode{isObj: true}
		for _, kv := range v {
			child, err := compileBody(kv.Value, lookup)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", kv.Key, err)
			}
			n.members = append(n.members, bodyMember{key: kv.Key, node: child})
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
		t, err := effectfile.ParseTemplate(v, lookup)
		if err != nil {
			return nil, err
		}
		return &bodyNode{tmpl: t}, nil
	}
	return &bodyNode{scalar: v}, nil
}

// placeholders returns every placeholder of the body.
func (n *bodyNode) placeholders() []*effectfile.Placeholder {
	if n == nil {
		return nil
	}
	var phs []*effectfile.Placeholder
	switch {
	case n.tmpl != nil:
		phs = n.tmpl.Placeholders()
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
func (n *bodyNode) render(rc *effectfile.RenderCtx) (v any, ok bool, err error) {
	switch {
	case n.tmpl != nil:
		return n.tmpl.RenderValue(rc)
	case n.isObj:
		out := effectfile.Map{}
		for _, m := range n.members {
			child, ok, err := m.node.render(rc)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out = append(out, effectfile.KV{Key: m.key, Value: child})
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
		case effectfile.Map:
			for _, kv := range v {
				walk(formKey(prefix, kv.Key), kv.Value)
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
			out = append(out, url.QueryEscape(prefix)+"="+url.QueryEscape(effectfile.Text(v)))
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

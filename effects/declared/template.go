package declared

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// placeholderKind is what a placeholder stands for.
type placeholderKind int

const (
	phEnv         placeholderKind = iota // {env.NAME}: read once at start
	phArgs                               // {args} or {args.seg.seg}
	phProviderKey                        // {provider_key}
	phCreatedAt                          // {intent.created_at}, look-ups only
)

// placeholder is one {...} of a template.
type placeholder struct {
	kind placeholderKind
	// name is the environment variable (phEnv).
	name string
	// path is the argument's path (phArgs); empty for the whole args.
	path []string
	// text is the placeholder as written, braces included.
	text string
}

// part is a template's literal text or a placeholder.
type part struct {
	literal string
	ph      *placeholder
}

// template is a parsed string with placeholders: the grammar of
// docs/effects.md, "Placeholders".
type template struct {
	raw   string
	parts []part
}

var (
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	segRE     = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*|0|[1-9][0-9]{0,8})$`)
)

// errUnknownPlaceholder is wrapped by parseTemplate's errors for a
// placeholder outside the grammar.
var errUnknownPlaceholder = errors.New("unknown placeholder")

// parseTemplate parses s. lookup allows {intent.created_at}.
func parseTemplate(s string, lookup bool) (*template, error) {
	t := &template{raw: s}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, part{literal: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '}':
			return nil, fmt.Errorf("a lone %q at offset %d (write }} for a literal brace)", "}", i)
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("an unclosed %q at offset %d (write {{ for a literal brace)", "{", i)
			}
			ph, err := parsePlaceholder(s[i+1:i+end], lookup)
			if err != nil {
				return nil, err
			}
			flush()
			t.parts = append(t.parts, part{ph: ph})
			i += end
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return t, nil
}

func parsePlaceholder(inner string, lookup bool) (*placeholder, error) {
	ph := &placeholder{text: "{" + inner + "}"}
	switch {
	case inner == "provider_key":
		ph.kind = phProviderKey
	case inner == "args":
		ph.kind = phArgs
	case strings.HasPrefix(inner, "args."):
		ph.kind = phArgs
		ph.path = strings.Split(strings.TrimPrefix(inner, "args."), ".")
		for _, seg := range ph.path {
			if !segRE.MatchString(seg) {
				return nil, fmt.Errorf("%w %s: each segment after args. is an identifier or an array index", errUnknownPlaceholder, ph.text)
			}
		}
	case strings.HasPrefix(inner, "env."):
		ph.kind = phEnv
		ph.name = strings.TrimPrefix(inner, "env.")
		if !envNameRE.MatchString(ph.name) {
			return nil, fmt.Errorf("%w %s: an environment variable's name is letters, digits and _", errUnknownPlaceholder, ph.text)
		}
	case inner == "intent.created_at":
		if !lookup {
			return nil, fmt.Errorf("%w %s: only a look-up may use it", errUnknownPlaceholder, ph.text)
		}
		ph.kind = phCreatedAt
	default:
		return nil, fmt.Errorf("%w %s: expected {env.NAME}, {args}, {args.path}, {provider_key} or, in a look-up, {intent.created_at}", errUnknownPlaceholder, ph.text)
	}
	return ph, nil
}

// single returns the template's placeholder when the template is exactly
// one placeholder, else nil.
func (t *template) single() *placeholder {
	if len(t.parts) == 1 && t.parts[0].ph != nil {
		return t.parts[0].ph
	}
	return nil
}

// placeholders returns the template's placeholders.
func (t *template) placeholders() []*placeholder {
	var phs []*placeholder
	for _, p := range t.parts {
		if p.ph != nil {
			phs = append(phs, p.ph)
		}
	}
	return phs
}

// renderCtx is what placeholders are filled from in one attempt.
type renderCtx struct {
	// args are the intent's arguments, decoded with json.Number.
	args        any
	env         map[string]string
	providerKey string
	createdAt   string
}

// errAbsent is value's answer for an argument that is absent or null.
var errAbsent = errors.New("absent")

// value returns a placeholder's value: a string, a json.Number, a bool, or
// an object or array (map[string]any, []any). It returns errAbsent for an
// argument that is absent or null.
func (rc *renderCtx) value(ph *placeholder) (any, error) {
	switch ph.kind {
	case phEnv:
		return rc.env[ph.name], nil
	case phProviderKey:
		return rc.providerKey, nil
	case phCreatedAt:
		return rc.createdAt, nil
	}
	v := rc.args
	for _, seg := range ph.path {
		switch node := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = node[seg]; !ok {
				return nil, errAbsent
			}
		case []any:
			var i int
			if _, err := fmt.Sscanf(seg, "%d", &i); err != nil || i < 0 || i >= len(node) {
				return nil, errAbsent
			}
			v = node[i]
		default:
			return nil, errAbsent
		}
	}
	if v == nil {
		return nil, errAbsent
	}
	return v, nil
}

// text renders v as text: strings as they are, numbers with their exact
// text, objects and arrays as compact JSON.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(buf.String(), "\n")
}

// invalidArgsError is an argument that cannot be rendered into a request:
// the effect's Execute answers it as a permanent invalid_args.
type invalidArgsError struct {
	msg string
}

func (e *invalidArgsError) Error() string { return e.msg }

// renderString renders t as text. ok is false when t is exactly one
// placeholder whose argument is absent (the caller drops what holds it); an
// absent argument inside longer text is an *invalidArgsError. Escaping is
// the caller's (a path segment, a query value).
func (t *template) renderString(rc *renderCtx) (s string, ok bool, err error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.ph == nil {
			b.WriteString(p.literal)
			continue
		}
		v, err := rc.value(p.ph)
		if errors.Is(err, errAbsent) {
			if t.single() != nil {
				return "", false, nil
			}
			return "", false, &invalidArgsError{msg: fmt.Sprintf("%s is absent, and the text %q needs it", p.ph.text, t.raw)}
		}
		b.WriteString(text(v))
	}
	return b.String(), true, nil
}

// renderValue renders t as a JSON value: a template that is exactly one
// placeholder takes the argument's JSON type, any other is a string. ok is
// false for an absent argument of a single placeholder.
func (t *template) renderValue(rc *renderCtx) (v any, ok bool, err error) {
	if ph := t.single(); ph != nil {
		v, err := rc.value(ph)
		if errors.Is(err, errAbsent) {
			return nil, false, nil
		}
		return v, err == nil, err
	}
	s, ok, err := t.renderString(rc)
	return s, ok, err
}

package effectfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// PlaceholderKind is what a placeholder stands for.
type PlaceholderKind int

// The kinds of placeholder.
const (
	KindEnv         PlaceholderKind = iota // {env.NAME}: read once at start
	KindArgs                               // {args} or {args.seg.seg}
	KindProviderKey                        // {provider_key}
	KindCreatedAt                          // {intent.created_at}, look-ups only
)

// Placeholder is one {...} of a template.
type Placeholder struct {
	Kind PlaceholderKind
	// Name is the environment variable (KindEnv).
	Name string
	// Path is the argument's path (KindArgs); empty for the whole args.
	Path []string
	// Text is the placeholder as written, braces included.
	Text string
}

// Part is a template's literal text or a placeholder.
type Part struct {
	Literal     string
	Placeholder *Placeholder
}

// Template is a parsed string with placeholders: the grammar of
// docs/effects.md, "Placeholders".
type Template struct {
	Raw   string
	Parts []Part
}

var (
	// EnvNameRE is a variable's name, as {env.NAME} and a file's env and
	// inherit take it.
	EnvNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	segRE     = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*|0|[1-9][0-9]{0,8})$`)
)

// errUnknownPlaceholder is wrapped by ParseTemplate's errors for a
// placeholder outside the grammar.
var errUnknownPlaceholder = errors.New("unknown placeholder")

// ParseTemplate parses s. lookup allows {intent.created_at}.
func ParseTemplate(s string, lookup bool) (*Template, error) {
	t := &Template{Raw: s}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.Parts = append(t.Parts, Part{Literal: lit.String()})
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
			ph, err := ParsePlaceholder(s[i+1:i+end], lookup)
			if err != nil {
				return nil, err
			}
			flush()
			t.Parts = append(t.Parts, Part{Placeholder: ph})
			i += end
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return t, nil
}

// ParsePlaceholder parses one placeholder, the text between its braces.
// lookup allows {intent.created_at}.
func ParsePlaceholder(inner string, lookup bool) (*Placeholder, error) {
	ph := &Placeholder{Text: "{" + inner + "}"}
	switch {
	case inner == "provider_key":
		ph.Kind = KindProviderKey
	case inner == "args":
		ph.Kind = KindArgs
	case strings.HasPrefix(inner, "args."):
		ph.Kind = KindArgs
		ph.Path = strings.Split(strings.TrimPrefix(inner, "args."), ".")
		for _, seg := range ph.Path {
			if !segRE.MatchString(seg) {
				return nil, fmt.Errorf("%w %s: each segment after args. is an identifier or an array index", errUnknownPlaceholder, ph.Text)
			}
		}
	case strings.HasPrefix(inner, "env."):
		ph.Kind = KindEnv
		ph.Name = strings.TrimPrefix(inner, "env.")
		if !EnvNameRE.MatchString(ph.Name) {
			return nil, fmt.Errorf("%w %s: an environment variable's name is letters, digits and _", errUnknownPlaceholder, ph.Text)
		}
	case inner == "intent.created_at":
		if !lookup {
			return nil, fmt.Errorf("%w %s: only a look-up may use it", errUnknownPlaceholder, ph.Text)
		}
		ph.Kind = KindCreatedAt
	default:
		return nil, fmt.Errorf("%w %s: expected {env.NAME}, {args}, {args.path}, {provider_key} or, in a look-up, {intent.created_at}", errUnknownPlaceholder, ph.Text)
	}
	return ph, nil
}

// Single returns the template's placeholder when the template is exactly
// one placeholder, else nil.
func (t *Template) Single() *Placeholder {
	if len(t.Parts) == 1 && t.Parts[0].Placeholder != nil {
		return t.Parts[0].Placeholder
	}
	return nil
}

// Placeholders returns the template's placeholders.
func (t *Template) Placeholders() []*Placeholder {
	var phs []*Placeholder
	for _, p := range t.Parts {
		if p.Placeholder != nil {
			phs = append(phs, p.Placeholder)
		}
	}
	return phs
}

// RenderCtx is what placeholders are filled from in one attempt.
type RenderCtx struct {
	// Args are the intent's arguments, decoded with json.Number.
	Args        any
	Env         map[string]string
	ProviderKey string
	CreatedAt   string
}

// errAbsent is value's answer for an argument that is absent or null.
var errAbsent = errors.New("absent")

// value returns a placeholder's value: a string, a json.Number, a bool, or
// an object or array (map[string]any, []any). It returns errAbsent for an
// argument that is absent or null.
func (rc *RenderCtx) value(ph *Placeholder) (any, error) {
	switch ph.Kind {
	case KindEnv:
		return rc.Env[ph.Name], nil
	case KindProviderKey:
		return rc.ProviderKey, nil
	case KindCreatedAt:
		return rc.CreatedAt, nil
	}
	v := rc.Args
	for _, seg := range ph.Path {
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

// Text renders v as text: strings as they are, numbers with their exact
// text, objects and arrays as compact JSON.
func Text(v any) string {
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

// InvalidArgsError is an argument that cannot be rendered into a request:
// the effect's Execute answers it as a permanent invalid_args.
type InvalidArgsError struct {
	Msg string
}

// Error implements error.
func (e *InvalidArgsError) Error() string { return e.Msg }

// RenderString renders t as text. ok is false when t is exactly one
// placeholder whose argument is absent (the caller drops what holds it); an
// absent argument inside longer text is an *InvalidArgsError. Escaping is
// the caller's (a path segment, a query value).
func (t *Template) RenderString(rc *RenderCtx) (s string, ok bool, err error) {
	var b strings.Builder
	for _, p := range t.Parts {
		if p.Placeholder == nil {
			b.WriteString(p.Literal)
			continue
		}
		v, err := rc.value(p.Placeholder)
		if errors.Is(err, errAbsent) {
			if t.Single() != nil {
				return "", false, nil
			}
			return "", false, &InvalidArgsError{Msg: fmt.Sprintf("%s is absent, and the text %q needs it", p.Placeholder.Text, t.Raw)}
		}
		b.WriteString(Text(v))
	}
	return b.String(), true, nil
}

// RenderValue renders t as a JSON value: a template that is exactly one
// placeholder takes the argument's JSON type, any other is a string. ok is
// false for an absent argument of a single placeholder.
func (t *Template) RenderValue(rc *RenderCtx) (v any, ok bool, err error) {
	if ph := t.Single(); ph != nil {
		v, err := rc.value(ph)
		if errors.Is(err, errAbsent) {
			return nil, false, nil
		}
		return v, err == nil, err
	}
	s, ok, err := t.RenderString(rc)
	return s, ok, err
}

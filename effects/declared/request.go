package declared

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
)

var (
	codeRE       = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// fields of a request, of a look-up and of an outcome rule.
var (
	requestFields = []string{"method", "url", "headers", "encoding", "form_arrays", "body", "timeout"}
	lookupFields  = []string{"method", "url", "headers", "items", "match", "found", "missing", "result", "timeout"}
	ruleFields    = []string{"when", "class", "code"}
)

// request checks a request (the effect's, or a look-up's members).
func (l *loader) request(e *Effect, m orderedMap, field string, lookup bool, fail failFunc) (*requestDecl, error) {
	d := &requestDecl{timeout: l.cfg.EffectTimeout, formArrays: formArraysIndexed}
	method := http.MethodPost
	if lookup {
		method = http.MethodGet
	}
	if v, ok := m.get("method"); ok {
		s, _ := v.(string)
		method = strings.ToUpper(s)
	}
	if !slices.Contains([]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}, method) {
		return nil, fail(field+".method", "must be GET, POST, PUT, PATCH or DELETE")
	}
	d.method = method
	u, _ := m.get("url")
	us, _ := u.(string)
	if us == "" {
		return nil, fail(field+".url", "required")
	}
	var err error
	if d.url, err = parseURLTemplate(us, lookup); err != nil {
		return nil, fail(field+".url", "%v", err)
	}
	if h, ok := m.get("headers"); ok {
		hm, ok := h.(orderedMap)
		if !ok {
			return nil, fail(field+".headers", "must map header names to values")
		}
		for _, kv := range hm {
			f := field + ".headers." + kv.key
			if !headerNameRE.MatchString(kv.key) {
				return nil, fail(f, "not a valid header name")
			}
			switch http.CanonicalHeaderKey(kv.key) {
			case "Host", "Content-Length", "Transfer-Encoding", "Connection":
				return nil, fail(f, "cannot be declared: the HTTP client sets it")
			}
			vs, ok := kv.value.(string)
			if !ok {
				vs = text(kv.value)
			}
			t, err := parseTemplate(vs, lookup)
			if err != nil {
				return nil, fail(f, "%v", err)
			}
			d.headers = append(d.headers, headerDecl{name: kv.key, value: t})
		}
	}
	if enc, ok := m.get("encoding"); ok {
		switch enc {
		case "json":
		case "form":
			d.form = true
		default:
			return nil, fail(field+".encoding", "must be json or form, not %v", enc)
		}
	}
	if fa, ok := m.get("form_arrays"); ok {
		if !d.form {
			return nil, fail(field+".form_arrays", "only with encoding: form")
		}
		s, _ := fa.(string)
		if !slices.Contains([]string{formArraysIndexed, formArraysBrackets, formArraysRepeat}, s) {
			return nil, fail(field+".form_arrays", "must be indexed, brackets or repeat")
		}
		d.formArrays = s
	}
	if b, ok := m.get("body"); ok {
		if method == http.MethodGet {
			return nil, fail(field+".body", "a GET sends no body")
		}
		if d.body, err = compileBody(b, lookup); err != nil {
			return nil, fail(field+".body", "%v", err)
		}
		if d.form && !d.body.isObj {
			return nil, fail(field+".body", "a form body is a mapping")
		}
	}
	if t, ok := m.get("timeout"); ok {
		ts, _ := t.(string)
		d.timeout, err = time.ParseDuration(ts)
		if err != nil || d.timeout <= 0 {
			return nil, fail(field+".timeout", "must be a positive Go duration such as 10s")
		}
		if d.timeout > l.cfg.EffectTimeout {
			return nil, fail(field+".timeout", "at most OUTBOX_EFFECT_TIMEOUT (%s), the attempt's lease", l.cfg.EffectTimeout)
		}
	}
	// Every argument a placeholder names must exist in the schema: a typo
	// would otherwise drop a member silently.
	for _, ph := range d.placeholders() {
		if ph.kind == phArgs && len(ph.path) > 0 && !schemaHas(e.schemaJSON, ph.path) {
			return nil, fail(field, "%s: no such property in args", ph.text)
		}
	}
	return d, nil
}

func (d *requestDecl) placeholders() []*placeholder {
	phs := d.url.placeholders()
	for _, h := range d.headers {
		phs = append(phs, h.value.placeholders()...)
	}
	return append(phs, d.body.placeholders()...)
}

// conditionsUseProviderKey reports whether the look-up's match (or found)
// names provider_key: a listing may find the effect by the key alone.
func (d *lookupDecl) conditionsUseProviderKey() bool {
	for _, c := range []*condition{d.match, d.found} {
		if c != nil && c.usesProviderKey {
			return true
		}
	}
	return false
}

func usesProviderKey(d *requestDecl) bool {
	for _, ph := range d.placeholders() {
		if ph.kind == phProviderKey {
			return true
		}
	}
	return false
}

func (e *Effect) requests() []*requestDecl {
	if e.lookup != nil {
		return []*requestDecl{e.request, e.lookup.request}
	}
	return []*requestDecl{e.request}
}

func (e *Effect) allPlaceholders() []*placeholder {
	var phs []*placeholder
	for _, d := range e.requests() {
		phs = append(phs, d.placeholders()...)
	}
	return phs
}

// result checks a result mapping: names to JSON pointers.
func (l *loader) result(m orderedMap, field string, fail failFunc) ([]resultField, error) {
	v, ok := m.get(field)
	if !ok {
		return nil, nil
	}
	rm, ok := v.(orderedMap)
	if !ok {
		return nil, fail(field, "must map names to JSON pointers such as /id")
	}
	var out []resultField
	for _, kv := range rm {
		p, _ := kv.value.(string)
		if p != "" && !strings.HasPrefix(p, "/") {
			return nil, fail(field+"."+kv.key, "a JSON pointer starts with /, such as /id")
		}
		out = append(out, resultField{name: kv.key, pointer: p})
	}
	return out, nil
}

// lookup checks a look-up.
func (l *loader) lookup(e *Effect, v any, fail failFunc) (*lookupDecl, error) {
	m, ok := v.(orderedMap)
	if !ok {
		return nil, fail("lookup", "must be a mapping")
	}
	if err := l.known(m, "$.effects."+e.name+".lookup", e.name, lookupFields); err != nil {
		return nil, err
	}
	d := &lookupDecl{}
	var err error
	if d.request, err = l.request(e, m, "lookup", true, fail); err != nil {
		return nil, err
	}
	get := func(f string) string { s, _ := m.get(f); str, _ := s.(string); return str }
	items, match, found, missing := get("items"), get("match"), get("found"), get("missing")
	switch {
	case items != "" || match != "":
		if items == "" || match == "" {
			return nil, fail("lookup.items", "items and match go together")
		}
		if found != "" || missing != "" {
			return nil, fail("lookup.found", "either items and match, or found and missing")
		}
		if d.items, err = compileCondition(items, false, cel.ListType(cel.DynType)); err != nil {
			return nil, fail("lookup.items", "%v", err)
		}
		if d.match, err = compileCondition(match, true, cel.BoolType); err != nil {
			return nil, fail("lookup.match", "%v", err)
		}
	case found != "" && missing != "":
		if d.found, err = compileCondition(found, false, cel.BoolType); err != nil {
			return nil, fail("lookup.found", "%v", err)
		}
		if d.missing, err = compileCondition(missing, false, cel.BoolType); err != nil {
			return nil, fail("lookup.missing", "%v", err)
		}
	default:
		return nil, fail("lookup", "needs items and match (a listing), or found and missing (a fetch by key)")
	}
	if d.result, err = l.result(m, "result", func(field, format string, args ...any) error {
		return fail("lookup."+field, format, args...)
	}); err != nil {
		return nil, err
	}
	return d, nil
}

// outcome checks the outcome rules, which classify an answer before the
// default classes do.
func (l *loader) outcome(e *Effect, decl orderedMap, fail failFunc) ([]rule, error) {
	rules, ok := decl.get("outcome")
	if !ok {
		return nil, nil
	}
	list, ok := rules.([]any)
	if !ok {
		return nil, fail("outcome", "must be a list of rules")
	}
	var out []rule
	for i, r := range list {
		field := fmt.Sprintf("outcome[%d]", i)
		rm, ok := r.(orderedMap)
		if !ok {
			return nil, fail(field, "must be a mapping with when and class")
		}
		if err := l.known(rm, "$.effects."+e.name+"."+field, e.name, ruleFields); err != nil {
			return nil, err
		}
		when, _ := rm.get("when")
		whenS, _ := when.(string)
		cond, err := compileCondition(whenS, false, cel.BoolType)
		if err != nil {
			return nil, fail(field+".when", "%v", err)
		}
		class, _ := rm.get("class")
		classS, _ := class.(string)
		if !slices.Contains([]string{ClassSuccess, ClassNotSent, ClassPermanent, ClassAmbiguous}, classS) {
			return nil, fail(field+".class", "must be success, not_sent, permanent or ambiguous, not %v", class)
		}
		code := ""
		if c, ok := rm.get("code"); ok {
			code, _ = c.(string)
			if !codeRE.MatchString(code) {
				return nil, fail(field+".code", "an error code is snake_case, such as card_declined")
			}
		}
		out = append(out, rule{when: cond, class: classS, code: code})
	}
	return out, nil
}

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

// request checks a request (the effect's, or a look-up's members). It
// returns nil, and every problem found, when the request is refused.
func (l *loader) request(e *Effect, m orderedMap, field string, lookup bool, fail failFunc) (*requestDecl, error) {
	var errs FileErrors
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
		errs.add(fail(field+".method", "must be GET, POST, PUT, PATCH or DELETE"))
	}
	d.method = method
	u, _ := m.get("url")
	us, _ := u.(string)
	var err error
	if us == "" {
		errs.add(fail(field+".url", "required"))
	} else if d.url, err = parseURLTemplate(us, lookup); err != nil {
		errs.add(fail(field+".url", "%v", err))
	}
	if h, ok := m.get("headers"); ok {
		hm, ok := h.(orderedMap)
		if !ok {
			errs.add(fail(field+".headers", "must map header names to values"))
		}
		for _, kv := range hm {
			f := field + ".headers." + kv.key
			if !headerNameRE.MatchString(kv.key) {
				errs.add(fail(f, "not a valid header name"))
				continue
			}
			switch http.CanonicalHeaderKey(kv.key) {
			case "Host", "Content-Length", "Transfer-Encoding", "Connection":
				errs.add(fail(f, "cannot be declared: the HTTP client sets it"))
				continue
			}
			vs, ok := kv.value.(string)
			if !ok {
				vs = text(kv.value)
			}
			t, err := parseTemplate(vs, lookup)
			if err != nil {
				errs.add(fail(f, "%v", err))
				continue
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
			errs.add(fail(field+".encoding", "must be json or form, not %v", enc))
		}
	}
	if fa, ok := m.get("form_arrays"); ok {
		s, _ := fa.(string)
		switch {
		case !d.form:
			errs.add(fail(field+".form_arrays", "only with encoding: form"))
		case !slices.Contains([]string{formArraysIndexed, formArraysBrackets, formArraysRepeat}, s):
			errs.add(fail(field+".form_arrays", "must be indexed, brackets or repeat"))
		default:
			d.formArrays = s
		}
	}
	if b, ok := m.get("body"); ok {
		if method == http.MethodGet {
			errs.add(fail(field+".body", "a GET sends no body"))
		} else if d.body, err = compileBody(b, lookup); err != nil {
			errs.add(fail(field+".body", "%v", err))
		} else if d.form && !d.body.isObj {
			errs.add(fail(field+".body", "a form body is a mapping"))
		}
	}
	if t, ok := m.get("timeout"); ok {
		ts, _ := t.(string)
		d.timeout, err = time.ParseDuration(ts)
		switch {
		case err != nil || d.timeout <= 0:
			errs.add(fail(field+".timeout", "must be a positive Go duration such as 10s"))
		case d.timeout > l.cfg.EffectTimeout:
			errs.add(fail(field+".timeout", "at most OUTBOX_EFFECT_TIMEOUT (%s), the attempt's lease", l.cfg.EffectTimeout))
		}
	}
	if len(errs) > 0 {
		return nil, errs.err()
	}
	// Every argument a placeholder names must exist in the schema: a typo
	// would otherwise drop a member silently. A schema refused has no
	// properties to look in.
	if e.schemaJSON != nil {
		for _, ph := range d.placeholders() {
			if ph.kind == phArgs && len(ph.path) > 0 && !schemaHas(e.schemaJSON, ph.path) {
				errs.add(fail(field, "%s: no such property in args", ph.text))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs.err()
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

// requests returns the effect's requests: its own and its look-up's, those
// accepted while the file is checked.
func (e *Effect) requests() []*requestDecl {
	var out []*requestDecl
	if e.request != nil {
		out = append(out, e.request)
	}
	if e.lookup != nil {
		out = append(out, e.lookup.request)
	}
	return out
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
	var errs FileErrors
	var out []resultField
	for _, kv := range rm {
		p, _ := kv.value.(string)
		if p != "" && !strings.HasPrefix(p, "/") {
			errs.add(fail(field+"."+kv.key, "a JSON pointer starts with /, such as /id"))
			continue
		}
		out = append(out, resultField{name: kv.key, pointer: p})
	}
	if len(errs) > 0 {
		return nil, errs.err()
	}
	return out, nil
}

// lookup checks a look-up. It returns nil, and every problem found, when
// the look-up is refused.
func (l *loader) lookup(e *Effect, v any, fail failFunc) (*lookupDecl, error) {
	m, ok := v.(orderedMap)
	if !ok {
		return nil, fail("lookup", "must be a mapping")
	}
	var errs FileErrors
	errs.add(l.known(m, "$.effects."+e.name+".lookup", e.name, lookupFields))
	d := &lookupDecl{}
	var err error
	if d.request, err = l.request(e, m, "lookup", true, fail); err != nil {
		errs.add(err)
	}
	compile := func(f, expr string, items bool, want *cel.Type) *condition {
		c, err := compileCondition(expr, items, want)
		if err != nil {
			errs.add(fail("lookup."+f, "%v", err))
		}
		return c
	}
	get := func(f string) string { s, _ := m.get(f); str, _ := s.(string); return str }
	items, match, found, missing := get("items"), get("match"), get("found"), get("missing")
	switch {
	case items != "" || match != "":
		if items == "" || match == "" {
			errs.add(fail("lookup.items", "items and match go together"))
			break
		}
		if found != "" || missing != "" {
			errs.add(fail("lookup.found", "either items and match, or found and missing"))
			break
		}
		d.items = compile("items", items, false, cel.ListType(cel.DynType))
		d.match = compile("match", match, true, cel.BoolType)
	case found != "" && missing != "":
		d.found = compile("found", found, false, cel.BoolType)
		d.missing = compile("missing", missing, false, cel.BoolType)
	default:
		errs.add(fail("lookup", "needs items and match (a listing), or found and missing (a fetch by key)"))
	}
	if d.result, err = l.result(m, "result", func(field, format string, args ...any) error {
		return fail("lookup."+field, format, args...)
	}); err != nil {
		errs.add(err)
	}
	if len(errs) > 0 {
		return nil, errs.err()
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
	var errs FileErrors
	var out []rule
	for i, r := range list {
		field := fmt.Sprintf("outcome[%d]", i)
		rm, ok := r.(orderedMap)
		if !ok {
			errs.add(fail(field, "must be a mapping with when and class"))
			continue
		}
		before := len(errs)
		errs.add(l.known(rm, "$.effects."+e.name+"."+field, e.name, ruleFields))
		when, _ := rm.get("when")
		whenS, _ := when.(string)
		cond, err := compileCondition(whenS, false, cel.BoolType)
		if err != nil {
			errs.add(fail(field+".when", "%v", err))
		}
		class, _ := rm.get("class")
		classS, _ := class.(string)
		if !slices.Contains([]string{ClassSuccess, ClassNotSent, ClassPermanent, ClassAmbiguous}, classS) {
			errs.add(fail(field+".class", "must be success, not_sent, permanent or ambiguous, not %v", class))
		}
		code := ""
		if c, ok := rm.get("code"); ok {
			code, _ = c.(string)
			if !codeRE.MatchString(code) {
				errs.add(fail(field+".code", "an error code is snake_case, such as card_declined"))
			}
		}
		if len(errs) == before {
			out = append(out, rule{when: cond, class: classS, code: code})
		}
	}
	if len(errs) > 0 {
		return nil, errs.err()
	}
	return out, nil
}

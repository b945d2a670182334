package declared

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// fields of a request and of a look-up.
var (
	requestFields = []string{"method", "url", "headers", "encoding", "form_arrays", "body", "timeout"}
	lookupFields  = []string{"method", "url", "headers", "items", "match", "found", "missing", "result", "timeout"}
)

// request checks a request (the effect's, or a look-up's members). It
// returns nil, and every problem found, when the request is refused.
func (l *loader) request(e *Effect, m effectfile.Map, field string, lookup bool, fail effectfile.FailFunc) (*requestDecl, error) {
	var errs effectfile.FileErrors
	d := &requestDecl{timeout: l.cfg.EffectTimeout, formArrays: formArraysIndexed}
	method := http.MethodPost
	if lookup {
		method = http.MethodGet
	}
	if v, ok := m.Get("method"); ok {
		s, _ := v.(string)
		method = strings.ToUpper(s)
	}
	if !slices.Contains([]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}, method) {
		errs.Add(fail(field+".method", "must be GET, POST, PUT, PATCH or DELETE"))
	}
	d.method = method
	u, _ := m.Get("url")
	us, _ := u.(string)
	var err error
	if us == "" {
		errs.Add(fail(field+".url", "required"))
	} else if d.url, err = parseURLTemplate(us, lookup); err != nil {
		errs.Add(fail(field+".url", "%v", err))
	}
	if h, ok := m.Get("headers"); ok {
		hm, ok := h.(effectfile.Map)
		if !ok {
			errs.Add(fail(field+".headers", "must map header names to values"))
		}
		for _, kv := range hm {
			f := field + ".headers." + kv.Key
			if !effectfile.HeaderNameRE.MatchString(kv.Key) {
				errs.Add(fail(f, "not a valid header name"))
				continue
			}
			switch http.CanonicalHeaderKey(kv.Key) {
			case "Host", "Content-Length", "Transfer-Encoding", "Connection":
				errs.Add(fail(f, "cannot be declared: the HTTP client sets it"))
				continue
			}
			vs, ok := kv.Value.(string)
			if !ok {
				vs = effectfile.Text(kv.Value)
			}
			t, err := effectfile.ParseTemplate(vs, lookup)
			if err != nil {
				errs.Add(fail(f, "%v", err))
				continue
			}
			d.headers = append(d.headers, headerDecl{name: kv.Key, value: t})
		}
	}
	if enc, ok := m.Get("encoding"); ok {
		switch enc {
		case "json":
		case "form":
			d.form = true
		default:
			errs.Add(fail(field+".encoding", "must be json or form, not %v", enc))
		}
	}
	if fa, ok := m.Get("form_arrays"); ok {
		s, _ := fa.(string)
		switch {
		case !d.form:
			errs.Add(fail(field+".form_arrays", "only with encoding: form"))
		case !slices.Contains([]string{formArraysIndexed, formArraysBrackets, formArraysRepeat}, s):
			errs.Add(fail(field+".form_arrays", "must be indexed, brackets or repeat"))
		default:
			d.formArrays = s
		}
	}
	if b, ok := m.Get("body"); ok {
		if method == http.MethodGet {
			errs.Add(fail(field+".body", "a GET sends no body"))
		} else if d.body, err = compileBody(b, lookup); err != nil {
			errs.Add(fail(field+".body", "%v", err))
		} else if d.form && !d.body.isObj {
			errs.Add(fail(field+".body", "a form body is a mapping"))
		}
	}
	if t, ok := m.Get("timeout"); ok {
		ts, _ := t.(string)
		d.timeout, err = time.ParseDuration(ts)
		switch {
		case err != nil || d.timeout <= 0:
			errs.Add(fail(field+".timeout", "must be a positive Go duration such as 10s"))
		case d.timeout > l.cfg.EffectTimeout:
			errs.Add(fail(field+".timeout", "at most OUTBOX_EFFECT_TIMEOUT (%s), the attempt's lease", l.cfg.EffectTimeout))
		}
	}
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	// Every argument a placeholder names must exist in the schema: a typo
	// would otherwise drop a member silently. A schema refused has no
	// properties to look in.
	if e.schemaJSON != nil {
		for _, ph := range d.placeholders() {
			if ph.Kind == effectfile.KindArgs && len(ph.Path) > 0 && !schemaHas(e.schemaJSON, ph.Path) {
				errs.Add(fail(field, "%s: no such property in args", ph.Text))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	return d, nil
}

func (d *requestDecl) placeholders() []*effectfile.Placeholder {
	phs := d.url.placeholders()
	for _, h := range d.headers {
		phs = append(phs, h.value.Placeholders()...)
	}
	return append(phs, d.body.placeholders()...)
}

// conditionsUseProviderKey reports whether the look-up's match (or found)
// names provider_key: a listing may find the effect by the key alone.
func (d *lookupDecl) conditionsUseProviderKey() bool {
	for _, c := range []*effectfile.Condition{d.match, d.found} {
		if c != nil && c.UsesProviderKey {
			return true
		}
	}
	return false
}

func usesProviderKey(d *requestDecl) bool {
	for _, ph := range d.placeholders() {
		if ph.Kind == effectfile.KindProviderKey {
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

func (e *Effect) allPlaceholders() []*effectfile.Placeholder {
	var phs []*effectfile.Placeholder
	for _, d := range e.requests() {
		phs = append(phs, d.placeholders()...)
	}
	return phs
}

// lookup checks a look-up. It returns nil, and every problem found, when
// the look-up is refused.
func (l *loader) lookup(e *Effect, v any, fail effectfile.FailFunc) (*lookupDecl, error) {
	m, ok := v.(effectfile.Map)
	if !ok {
		return nil, fail("lookup", "must be a mapping")
	}
	var errs effectfile.FileErrors
	errs.Add(l.known(m, "$.effects."+e.name+".lookup", e.name, lookupFields))
	d, err := l.lookupBody(e, m, fail)
	errs.Add(err)
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	return d, nil
}

// lookupBody checks a look-up's members, known to be look-up fields: its
// request, its conditions and its result.
func (l *loader) lookupBody(e *Effect, m effectfile.Map, fail effectfile.FailFunc) (*lookupDecl, error) {
	var errs effectfile.FileErrors
	d := &lookupDecl{}
	var err error
	if d.request, err = l.request(e, m, "lookup", true, fail); err != nil {
		errs.Add(err)
	}
	compile := func(f, expr string, items bool, want *cel.Type) *effectfile.Condition {
		c, err := compileCondition(expr, items, want)
		if err != nil {
			errs.Add(fail("lookup."+f, "%v", err))
		}
		return c
	}
	get := func(f string) string { s, _ := m.Get(f); str, _ := s.(string); return str }
	items, match, found, missing := get("items"), get("match"), get("found"), get("missing")
	switch {
	case items != "" || match != "":
		if items == "" || match == "" {
			errs.Add(fail("lookup.items", "items and match go together"))
			break
		}
		if found != "" || missing != "" {
			errs.Add(fail("lookup.found", "either items and match, or found and missing"))
			break
		}
		d.items = compile("items", items, false, cel.ListType(cel.DynType))
		d.match = compile("match", match, true, cel.BoolType)
	case found != "" && missing != "":
		d.found = compile("found", found, false, cel.BoolType)
		d.missing = compile("missing", missing, false, cel.BoolType)
	default:
		errs.Add(fail("lookup", "needs items and match (a listing), or found and missing (a fetch by key)"))
	}
	if d.result, err = effectfile.ParseResult(m, "result", func(field, format string, args ...any) error {
		return fail("lookup."+field, format, args...)
	}); err != nil {
		errs.Add(err)
	}
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	return d, nil
}

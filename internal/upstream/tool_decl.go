package upstream

import (
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// upstreamTool checks the declaration of one upstream tool.
func (l *loader) upstreamTool(u *Upstream, name string, v any) (*ToolDecl, error) {
	base := "$.upstreams." + u.name + ".tools." + name
	prefix := "tools." + name + "."
	fail := func(field, format string, args ...any) error {
		path := base
		if field != "" {
			path += "." + field
		}
		return l.upstreamErrorf(path, u.name, strings.TrimSuffix(prefix+field, "."), format, args...)
	}
	m, ok := v.(effectfile.Map)
	if !ok {
		return nil, fail("", "must be a mapping")
	}
	if err := knownIn(m, "", toolFields, fail); err != nil {
		return nil, err
	}
	td := &ToolDecl{name: name, declarations: m}
	if len(u.include) > 0 && !slices.Contains(u.include, name) {
		return nil, fail("", "declared, but not in include: it would never be mirrored")
	}
	if slices.Contains(u.exclude, name) {
		return nil, fail("", "declared, but excluded: it would never be mirrored")
	}
	boolField := func(field string) (bool, error) {
		v, ok := m.Get(field)
		if !ok {
			return false, nil
		}
		b, ok := v.(bool)
		if !ok {
			return false, fail(field, "must be true or false")
		}
		return b, nil
	}
	var err error
	if td.passthrough, err = boolField("passthrough"); err != nil {
		return nil, err
	}
	if td.retrySafe, err = boolField("retry_safe"); err != nil {
		return nil, err
	}
	if td.description, err = optString(m, "description", fail); err != nil {
		return nil, err
	}
	if td.mirrored, err = optString(m, "name", fail); err != nil {
		return nil, err
	}
	if td.mirrored != "" && !effects.ValidName(td.mirrored) {
		return nil, fail("name", "a mirrored name must be a valid effect name (lowercase letters and digits, single _ between them, at most 64)")
	}
	if a, ok := m.Get("args"); ok {
		am, ok := a.(effectfile.Map)
		if !ok {
			return nil, fail("args", "must be a JSON Schema object (a replacement for the upstream's)")
		}
		if t, _ := am.Get("type"); t != "object" {
			return nil, fail("args.type", "the top level must be a plain type: object")
		}
		td.args = am
	}

	if td.passthrough {
		for _, f := range []string{"guarantee", "marker", "lookup", "settle", "key_arg", "dedupe_window", "retry_safe", "outcome", "args"} {
			if _, ok := m.Get(f); ok {
				return nil, fail(f, "a pass-through tool is forwarded live, never recorded: it has no %s", f)
			}
		}
		return td, nil
	}

	td.guarantee = effects.GuaranteeAtMostOnce
	if g, ok := m.Get("guarantee"); ok {
		s, _ := g.(string)
		td.guarantee = effects.Guarantee(s)
		if !td.guarantee.Valid() {
			return nil, fail("guarantee", "must be deduplicated, reconcilable or at_most_once, not %v", g)
		}
	}

	// Fields that belong to one guarantee.
	has := func(f string) bool { _, ok := m.Get(f); return ok }
	for f, g := range map[string]effects.Guarantee{
		"marker": effects.GuaranteeReconcilable, "lookup": effects.GuaranteeReconcilable, "settle": effects.GuaranteeReconcilable,
		"key_arg": effects.GuaranteeDeduplicated, "dedupe_window": effects.GuaranteeDeduplicated, "retry_safe": effects.GuaranteeDeduplicated,
	} {
		if has(f) && td.guarantee != g {
			return nil, fail(f, "only a %s tool has one (this one is %s)", g, td.guarantee)
		}
	}

	switch td.guarantee {
	case effects.GuaranteeDeduplicated:
		td.keyArg, err = optString(m, "key_arg", fail)
		if err != nil {
			return nil, err
		}
		switch {
		case td.keyArg != "" && td.retrySafe:
			return nil, fail("retry_safe", "a deduplicated tool has a key_arg (with dedupe_window) or is retry_safe, not both")
		case td.keyArg == "" && !td.retrySafe:
			return nil, fail("key_arg", "a deduplicated tool needs key_arg (the upstream's own idempotency key argument, with dedupe_window) or retry_safe: true")
		case td.keyArg != "":
			if slices.Contains(reservedArgs, td.keyArg) {
				return nil, fail("key_arg", "%s is outbox's own argument", td.keyArg)
			}
			w, _ := optString(m, "dedupe_window", fail)
			if w == "" {
				return nil, fail("dedupe_window", "required with key_arg: the upstream's documented window (a Go duration such as 24h)")
			}
			if td.window, err = time.ParseDuration(w); err != nil || td.window <= 0 {
				return nil, fail("dedupe_window", "must be a positive Go duration such as 24h, not %q", w)
			}
			if l.cfg.Retention > 0 && l.cfg.Retention < td.window {
				return nil, fail("dedupe_window", "longer than OUTBOX_RETENTION (%s): a key pruned inside the upstream's window could be reused for a new action", l.cfg.Retention)
			}
		default:
			if has("dedupe_window") {
				return nil, fail("dedupe_window", "a retry_safe tool has no window: repeating it changes nothing further")
			}
		}
	case effects.GuaranteeReconcilable:
		mv, ok := m.Get("marker")
		if !ok {
			return nil, fail("marker", "required for a reconcilable tool: where the provider key is written into the call, for the look-up to find")
		}
		if td.marker, err = parseMarker(mv, func(f, format string, args ...any) error { return fail("marker."+f, format, args...) }); err != nil {
			return nil, err
		}
		lv, ok := m.Get("lookup")
		if !ok {
			return nil, fail("lookup", "required for a reconcilable tool: how to ask the upstream whether the call acted")
		}
		if td.lookup, err = l.upstreamLookup(u.name+"_"+name, lv, func(f, format string, args ...any) error {
			return fail(strings.TrimSuffix("lookup."+f, "."), format, args...)
		}); err != nil {
			return nil, err
		}
		if s, ok := m.Get("settle"); ok {
			str, _ := s.(string)
			if td.settle, err = time.ParseDuration(str); err != nil || td.settle < 0 || td.settle > time.Hour {
				return nil, fail("settle", "must be a Go duration from 0 to 1h, not %v", s)
			}
		}
	}

	if td.rules, err = effectfile.ParseOutcome(m, func(expr string) (*effectfile.Condition, error) {
		return compileMCPCondition(expr, false, cel.BoolType)
	}, fail); err != nil {
		return nil, err
	}
	return td, nil
}

// parseMarker checks a marker: literal text and {provider_key} only.
func parseMarker(v any, fail func(string, string, ...any) error) (*markerDecl, error) {
	m, ok := v.(effectfile.Map)
	if !ok {
		return nil, fail("", "must be a mapping with arg and append (or prepend)")
	}
	for _, kv := range m {
		if !slices.Contains(markerFields, kv.Key) {
			return nil, fail(kv.Key, "unknown field (expected one of %s)", strings.Join(markerFields, ", "))
		}
	}
	d := &markerDecl{}
	arg, _ := m.Get("arg")
	d.arg, _ = arg.(string)
	if !markerArgRE.MatchString(d.arg) {
		return nil, fail("arg", "required: the string argument the marker is written into")
	}
	if slices.Contains(reservedArgs, d.arg) {
		return nil, fail("arg", "%s is outbox's own argument", d.arg)
	}
	app, hasApp := m.Get("append")
	pre, hasPre := m.Get("prepend")
	var s string
	switch {
	case hasApp == hasPre:
		return nil, fail("append", "one of append or prepend: the marker's text")
	case hasApp:
		s, _ = app.(string)
	default:
		s, _ = pre.(string)
		d.prepend = true
	}
	t, err := effectfile.ParseTemplate(s, false)
	if err != nil {
		return nil, fail("append", "%v", err)
	}
	uses := false
	for _, ph := range t.Placeholders() {
		if ph.Kind != effectfile.KindProviderKey {
			return nil, fail("append", "%s: a marker holds literal text and {provider_key} only", ph.Text)
		}
		uses = true
	}
	if !uses {
		return nil, fail("append", "a marker must hold {provider_key}: it is what the look-up finds the call by")
	}
	d.text = t
	return d, nil
}

// markerLengthMax is the length the marker adds at most, as enqueue
// validates it: its literal text plus a provider key.
func (d *markerDecl) length() int {
	n := 0
	for _, p := range d.text.Parts {
		if p.Placeholder != nil {
			n += effectfile.ProviderKeyLength
		} else {
			n += len([]rune(p.Literal))
		}
	}
	return n
}

// render returns the marker's text for providerKey.
func (d *markerDecl) render(providerKey string) string {
	s, _, _ := d.text.RenderString(&effectfile.RenderCtx{ProviderKey: providerKey})
	return s
}

// upstreamLookup checks a look-up of the tool named name: through a
// pass-through tool of the upstream, or an HTTP request.
func (l *loader) upstreamLookup(name string, v any, fail func(string, string, ...any) error) (*upstreamLookup, error) {
	m, ok := v.(effectfile.Map)
	if !ok {
		return nil, fail("", "must be a mapping")
	}
	if _, ok := m.Get("url"); ok {
		// An HTTP API that reads what the upstream wrote, declared as a
		// declared HTTP effect's look-up.
		if _, ok := m.Get("tool"); ok {
			return nil, fail("tool", "a look-up is either a tool of the upstream (tool and args) or an HTTP request (url), not both")
		}
		h, err := declared.ParseHTTPLookup(name, m, l.cfg, fail)
		if err != nil {
			return nil, err
		}
		return &upstreamLookup{http: h}, nil
	}
	for _, kv := range m {
		if !slices.Contains(upstreamLookupFields, kv.Key) {
			return nil, fail(kv.Key, "unknown field (expected one of %s)", strings.Join(upstreamLookupFields, ", "))
		}
	}
	d := &upstreamLookup{argT: map[string]*effectfile.Template{}}
	tool, _ := m.Get("tool")
	d.tool, _ = tool.(string)
	if d.tool == "" {
		return nil, fail("tool", "required: the upstream's pass-through tool that lists or fetches what the call made")
	}
	if a, ok := m.Get("args"); ok {
		am, ok := a.(effectfile.Map)
		if !ok {
			return nil, fail("args", "must map the look-up tool's arguments to values")
		}
		for _, kv := range am {
			t, err := effectfile.ParseTemplate(effectfile.Text(kv.Value), true)
			if err != nil {
				return nil, fail("args."+kv.Key, "%v", err)
			}
			for _, ph := range t.Placeholders() {
				if ph.Kind == effectfile.KindEnv {
					return nil, fail("args."+kv.Key, "%s: a look-up's arguments take {args.*}, {provider_key} and {intent.created_at}, not the environment", ph.Text)
				}
			}
			d.args = append(d.args, kv)
			d.argT[kv.Key] = t
		}
	}
	get := func(f string) string { s, _ := m.Get(f); str, _ := s.(string); return str }
	items, match, found, missing := get("items"), get("match"), get("found"), get("missing")
	var err error
	switch {
	case items != "" || match != "":
		if items == "" || match == "" {
			return nil, fail("items", "items and match go together")
		}
		if found != "" || missing != "" {
			return nil, fail("found", "either items and match, or found and missing")
		}
		if d.items, err = compileMCPCondition(items, false, cel.ListType(cel.DynType)); err != nil {
			return nil, fail("items", "%v", err)
		}
		if d.match, err = compileMCPCondition(match, true, cel.BoolType); err != nil {
			return nil, fail("match", "%v", err)
		}
		if !d.match.UsesProviderKey {
			return nil, fail("match", "must use provider_key: it is what the call is found by (the marker holds it)")
		}
	case found != "" && missing != "":
		if d.found, err = compileMCPCondition(found, false, cel.BoolType); err != nil {
			return nil, fail("found", "%v", err)
		}
		if d.missing, err = compileMCPCondition(missing, false, cel.BoolType); err != nil {
			return nil, fail("missing", "%v", err)
		}
	default:
		return nil, fail("", "needs items and match (a listing), or found and missing (a fetch)")
	}
	if d.result, err = effectfile.ParseResult(m, "result", func(field, format string, args ...any) error {
		return fail(field, format, args...)
	}); err != nil {
		return nil, err
	}
	return d, nil
}

package declared

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// HTTPLookup is a declared HTTP look-up standing on its own: the lookup of
// an MCP upstream's reconcilable tool that reads an HTTP API rather than
// one of the upstream's tools (docs/effects.md, "Look-ups"). It is checked,
// rendered, sent and read as a declared effect's look-up is: the same
// fields, placeholders, URL rules, conditions and secrets.
type HTTPLookup struct {
	e *Effect
}

// ParseHTTPLookup checks m, the HTTP look-up of the upstream tool named
// name, under config. fail reports a problem with a member of m (field
// "url", "items", "headers.Authorization"; "" for the look-up itself).
// Its error holds every problem found. The arguments' schema is the
// upstream's, pinned later: the {args.*} placeholders are checked against
// it with the lock (Placeholders).
func ParseHTTPLookup(name string, m effectfile.Map, config *Config, fail effectfile.FailFunc) (*HTTPLookup, error) {
	l := &loader{cfg: config.withDefaults()}
	var errs effectfile.FileErrors
	for _, kv := range m {
		if !slices.Contains(lookupFields, kv.Key) {
			errs.Add(fail(kv.Key, "unknown field (expected one of %s)", strings.Join(lookupFields, ", ")))
		}
	}
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	e := &Effect{name: name, tool: name, guarantee: effects.GuaranteeReconcilable, client: l.cfg.HTTPClient,
		onRuleError: l.cfg.OnRuleErrorFunc, env: map[string]string{}}
	// The effect's loader names a look-up's fields from the effect
	// ("lookup.url"); fail names them from the look-up.
	inner := func(field, format string, args ...any) error {
		field = strings.TrimPrefix(strings.TrimPrefix(field, "lookup"), ".")
		return fail(field, format, args...)
	}
	d, err := l.lookupBody(e, m, inner)
	if err != nil {
		return nil, err
	}
	e.lookup = d
	if !usesProviderKey(d.request) && !d.conditionsUseProviderKey() {
		return nil, fail("", "a look-up must use {provider_key}: it is what the call is found by (the marker holds it)")
	}
	if err := l.effectEnv(e, inner); err != nil {
		return nil, err
	}
	return &HTTPLookup{e: e}, nil
}

// URLTemplate is the look-up's URL as declared: what errors and logs show.
func (h *HTTPLookup) URLTemplate() string { return h.e.lookup.request.url.raw }

// Placeholders are the placeholders of the look-up's request (URL,
// headers, body).
func (h *HTTPLookup) Placeholders() []*effectfile.Placeholder {
	return h.e.lookup.request.placeholders()
}

// Result is the look-up's result fields: pointers into what Find returns.
func (h *HTTPLookup) Result() []effectfile.ResultField { return h.e.lookup.result }

// Find asks the HTTP API whether the call of req acted: found, with the
// matched item of a listing or the answer's body for a fetch, each
// scrubbed of the look-up's secrets. Anything but a clear answer is a
// lookup_failed error, never "not found".
func (h *HTTPLookup) Find(ctx context.Context, req *effects.Request, createdAt time.Time) (item any, found bool, err error) {
	item, found, _, err = h.e.find(ctx, req, createdAt)
	if err != nil || !found {
		return nil, false, err
	}
	return h.e.scrubValue(item), true, nil
}

// scrubValue returns v, a decoded JSON value, with every secret replaced
// in its strings and member names: the decoded text, where JSON's escapes
// cannot hide a secret.
func (e *Effect) scrubValue(v any) any {
	switch v := v.(type) {
	case string:
		return e.scrub(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[e.scrub(k)] = e.scrubValue(item)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = e.scrubValue(item)
		}
		return out
	case json.Number:
		return v
	}
	return v
}

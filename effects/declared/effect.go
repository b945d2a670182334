package declared

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/internal/httpsend"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// Effect is a declared HTTP effect: an effects.Effect like any other, and
// an effects.Reconciler when its guarantee is reconcilable.
type Effect struct {
	name        string
	description string
	tool        string
	guarantee   effects.Guarantee
	window      time.Duration
	schema      *jsonschema.Schema
	schemaJSON  json.RawMessage
	request     *requestDecl
	rules       []effectfile.Rule
	result      []effectfile.ResultField
	lookup      *lookupDecl
	sha256      string
	secrets     []string
	env         map[string]string
	client      *http.Client
	onRuleError func(effect string)
}

// The capabilities Effect has: the build breaks if a method drifts from
// its interface.
var (
	_ effects.Effect              = (*Effect)(nil)
	_ effects.ApprovalRuleChecker = (*Effect)(nil)
	_ effects.ArgsSchemaer        = (*Effect)(nil)
	_ effects.Declarer            = (*Effect)(nil)
	_ effects.DedupeWindower      = (*Effect)(nil)
	_ effects.Describer           = (*Effect)(nil)
	_ effects.Reconciler          = (*Effect)(nil)
	_ effects.RequestReconciler   = (*Effect)(nil)
	_ effects.ToolNamer           = (*Effect)(nil)
)

// requestDecl is a compiled request: the effect's, or its look-up's.
type requestDecl struct {
	method     string
	url        *urlTemplate
	headers    []headerDecl
	form       bool
	formArrays string
	body       *bodyNode
	timeout    time.Duration
}

type headerDecl struct {
	name  string
	value *effectfile.Template
}

type lookupDecl struct {
	request *requestDecl
	items   *effectfile.Condition
	match   *effectfile.Condition
	found   *effectfile.Condition
	missing *effectfile.Condition
	result  []effectfile.ResultField
}

// Name implements effects.Effect.
func (e *Effect) Name() string { return e.name }

// Guarantee implements effects.Effect.
func (e *Effect) Guarantee() effects.Guarantee { return e.guarantee }

// Description is the effect's description for agents: the MCP tool's and
// GET /v1/effects'.
func (e *Effect) Description() string { return e.description }

// Tool is the effect's MCP tool name.
func (e *Effect) Tool() string { return e.tool }

// ArgsSchema is the args' JSON Schema, as declared.
func (e *Effect) ArgsSchema() json.RawMessage { return e.schemaJSON }

// DeclarationSHA256 is the hex sha256 of the effect's resolved declaration
// (presets applied, secrets not included) less its description and tool
// name, which agents read and the request does not.
func (e *Effect) DeclarationSHA256() string { return e.sha256 }

// URLTemplate is the request's URL as declared, which logs and errors show
// instead of the URL sent (whose query may hold a secret).
func (e *Effect) URLTemplate() string { return e.request.url.raw }

// DedupeWindow implements effects.DedupeWindower: the declared window less
// the request's timeout, so that the worker's guard (which keeps its own
// margin) never resends a request that could arrive after the window.
func (e *Effect) DedupeWindow() time.Duration {
	return max(e.window-e.request.timeout, 0)
}

// CheckApprovalRule checks an approval rule's argument (outbox.ApprovalRule)
// against the declared schema: arg must be a top-level property, and a
// numeric comparison (numeric) needs a number or integer property. An empty
// arg (every intent of the effect) is always valid.
func (e *Effect) CheckApprovalRule(arg string, numeric bool) error {
	return effectfile.CheckApprovalRule(e.name, e.schemaJSON, arg, numeric)
}

// ValidateArgs implements effects.Effect with the declared JSON Schema.
func (e *Effect) ValidateArgs(args json.RawMessage) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &effects.ArgError{Message: "must be a valid JSON object"}
	}
	if _, ok := v.(map[string]any); !ok {
		return &effects.ArgError{Message: "must be a JSON object"}
	}
	if err := e.schema.Validate(v); err != nil {
		var verr *jsonschema.ValidationError
		if errors.As(err, &verr) {
			return effectfile.SchemaArgError(verr)
		}
		return &effects.ArgError{Message: err.Error()}
	}
	return nil
}

// attempt is one attempt's values.
type attempt struct {
	rc      *effectfile.RenderCtx
	celArgs any
}

func (e *Effect) newAttempt(req *effects.Request, createdAt time.Time) (*attempt, error) {
	dec := json.NewDecoder(bytes.NewReader(req.Args))
	dec.UseNumber()
	var args any
	if err := dec.Decode(&args); err != nil {
		return nil, effects.Permanent(effects.CodeInvalidArgs, fmt.Errorf("effect %s: args are not JSON", e.name))
	}
	var celArgs any
	_ = json.Unmarshal(req.Args, &celArgs)
	rc := &effectfile.RenderCtx{Args: args, Env: e.env, ProviderKey: req.ProviderKey}
	if !createdAt.IsZero() {
		rc.CreatedAt = createdAt.UTC().Format(time.RFC3339)
	}
	return &attempt{rc: rc, celArgs: celArgs}, nil
}

// build renders a request for one attempt.
func (e *Effect) build(ctx context.Context, d *requestDecl, a *attempt) (*http.Request, error) {
	u, err := d.url.render(a.rc)
	if err != nil {
		return nil, err
	}
	var body []byte
	contentType := ""
	if d.body != nil {
		v, _, err := d.body.render(a.rc)
		if err != nil {
			return nil, err
		}
		if d.form {
			body, contentType = []byte(formEncode(v, d.formArrays)), "application/x-www-form-urlencoded"
		} else {
			if body, err = effectfile.MarshalJSON(v); err != nil {
				return nil, &effectfile.InvalidArgsError{Msg: "the body cannot be encoded as JSON"}
			}
			contentType = "application/json"
		}
	}
	r, err := http.NewRequestWithContext(ctx, d.method, u, bytes.NewReader(body))
	if err != nil {
		return nil, &effectfile.InvalidArgsError{Msg: "the request cannot be built from " + d.url.raw}
	}
	if body == nil {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	r.Header.Set("Accept", "application/json")
	r.Header.Set("User-Agent", "outbox")
	for _, h := range d.headers {
		v, ok, err := h.value.RenderString(a.rc)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, &effectfile.InvalidArgsError{Msg: fmt.Sprintf("header %s cannot be sent: its value holds a line break", h.name)}
		}
		r.Header.Set(h.name, v)
	}
	return r, nil
}

// Execute implements effects.Effect.
func (e *Effect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	a, err := e.newAttempt(req, time.Time{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.request.timeout)
	defer cancel()
	httpReq, err := e.build(httpsend.WithURLTemplate(ctx, e.request.url.raw), e.request, a)
	if err != nil {
		return nil, e.renderError(err)
	}
	resp, err := httpsend.Do(e.client, httpReq, "effect "+e.name)
	if err != nil {
		return nil, e.scrubError(err)
	}
	return e.classify(resp, a)
}

// renderError classifies a request that could not be built: arguments that
// cannot be sent are permanent, and nothing was sent.
func (e *Effect) renderError(err error) error {
	var ia *effectfile.InvalidArgsError
	if errors.As(err, &ia) {
		return effects.Permanent(effects.CodeInvalidArgs, errors.New(e.scrub("effect "+e.name+": "+ia.Msg)))
	}
	return effects.NotSent("request_not_built", errors.New(e.scrub("effect "+e.name+": "+err.Error())))
}

// classify decides an answer's class: the rules first, in order, then the
// default classes of docs/effects.md.
func (e *Effect) classify(resp *httpsend.Response, a *attempt) (json.RawMessage, error) {
	vars := e.answerVars(resp, a)
	class, code := "", ""
	for _, r := range e.rules {
		ok, err := r.When.EvalBool(vars.activation(nil))
		if err != nil {
			// A rule that cannot be evaluated does not match; counted, so
			// that a rule broken by a provider's new answer shows.
			if e.onRuleError != nil {
				e.onRuleError(e.name)
			}
			continue
		}
		if ok {
			class, code = r.Class, r.Code
			break
		}
	}
	status := resp.StatusCode
	if class == "" {
		class = e.defaultClass(status)
	}
	if code == "" {
		code = "http_" + strconv.Itoa(status)
	}
	if class == ClassSuccess {
		result, err := e.extract(e.result, vars.body)
		if err != nil {
			return nil, effects.Ambiguous("unreadable_answer", fmt.Errorf("effect %s: answered %d, but %w", e.name, status, err))
		}
		return result, nil
	}
	msg := fmt.Errorf("effect %s: %s answered %d: %s", e.name, e.request.url.raw, status,
		e.scrub(httpsend.Truncate(string(resp.Body), ErrorTextMax)))
	switch class {
	case ClassNotSent:
		return nil, httpsend.WithRetryAfter(effects.NotSent(code, msg), resp.Header)
	case ClassPermanent:
		return nil, effects.Permanent(code, msg)
	}
	return nil, effects.Ambiguous(code, msg)
}

// defaultClass is a status's class when no rule matched.
func (e *Effect) defaultClass(status int) string {
	switch {
	case status >= 200 && status < 300:
		return ClassSuccess
	case status == http.StatusTooManyRequests:
		return ClassNotSent
	case status == http.StatusRequestTimeout || status == http.StatusTooEarly || status == http.StatusServiceUnavailable:
		// Documented by most providers as "not processed", but an
		// at-most-once effect has no key to make a wrong guess harmless.
		if e.guarantee == effects.GuaranteeAtMostOnce {
			return ClassAmbiguous
		}
		return ClassNotSent
	case status >= 400 && status < 500:
		return ClassPermanent
	}
	return ClassAmbiguous
}

func (e *Effect) answerVars(resp *httpsend.Response, a *attempt) *answerVars {
	headers := make(map[string]string, len(resp.Header))
	for name, values := range resp.Header {
		headers[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	var body any
	if len(bytes.TrimSpace(resp.Body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(resp.Body))
		if err := dec.Decode(&body); err != nil || dec.More() {
			body = string(resp.Body)
		}
	}
	return &answerVars{status: resp.StatusCode, headers: headers, body: body, args: a.celArgs, providerKey: a.rc.ProviderKey}
}

// extract builds a result from JSON pointers into v (effectfile.Extract),
// its secrets scrubbed.
func (e *Effect) extract(fields []effectfile.ResultField, v any) (json.RawMessage, error) {
	b, err := effectfile.Extract(fields, v)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(e.scrub(string(b))), nil
}

// Lookup implements effects.Reconciler for a look-up that needs neither
// the args nor the intent's creation time.
func (e *Effect) Lookup(ctx context.Context, providerKey string) (json.RawMessage, bool, error) {
	return e.LookupRequest(ctx, &effects.Request{Args: json.RawMessage(`{}`), ProviderKey: providerKey}, time.Time{})
}

// LookupRequest implements effects.RequestReconciler: it asks the provider
// whether the effect for req exists. Anything but a clear answer (another
// status, a CEL error, items that are not a list) is an error, never "not
// found".
func (e *Effect) LookupRequest(ctx context.Context, req *effects.Request, createdAt time.Time) (json.RawMessage, bool, error) {
	if e.lookup == nil {
		return nil, false, fmt.Errorf("effect %s has no look-up", e.name)
	}
	item, found, failed, err := e.find(ctx, req, createdAt)
	if err != nil || !found {
		return nil, false, err
	}
	result, err := e.extract(e.lookup.result, item)
	if err != nil {
		return nil, false, failed("%v", err)
	}
	return result, true, nil
}

// find sends the look-up for req and reads its answer: the matched item
// of a listing, or the answer's body when found holds. Its failed makes a
// lookup_failed error about the answer.
func (e *Effect) find(ctx context.Context, req *effects.Request, createdAt time.Time) (item any, found bool, failed func(string, ...any) error, err error) {
	a, err := e.newAttempt(req, createdAt)
	if err != nil {
		return nil, false, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.lookup.request.timeout)
	defer cancel()
	httpReq, err := e.build(httpsend.WithURLTemplate(ctx, e.lookup.request.url.raw), e.lookup.request, a)
	if err != nil {
		return nil, false, nil, e.renderError(err)
	}
	resp, err := httpsend.Do(e.client, httpReq, "look-up of effect "+e.name)
	if err != nil {
		return nil, false, nil, e.scrubError(err)
	}
	failed = func(format string, args ...any) error {
		return errors.New(e.scrub(fmt.Sprintf("lookup_failed: effect %s: %s answered %d: ", e.name, e.lookup.request.url.raw, resp.StatusCode) + fmt.Sprintf(format, args...)))
	}
	vars := e.answerVars(resp, a)
	act := vars.activation(nil)
	if e.lookup.items != nil {
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return nil, false, nil, failed("not a 2xx")
		}
		items, err := e.lookup.items.EvalList(act)
		if err != nil {
			return nil, false, nil, failed("items: %v", err)
		}
		for _, item := range items {
			ok, err := e.lookup.match.EvalBool(vars.activation(item))
			if err != nil {
				return nil, false, nil, failed("match: %v", err)
			}
			if ok {
				return item, true, failed, nil
			}
		}
		return nil, false, failed, nil
	}
	isFound, err1 := e.lookup.found.EvalBool(act)
	missing, err2 := e.lookup.missing.EvalBool(act)
	if err := errors.Join(err1, err2); err != nil {
		return nil, false, nil, failed("%v", err)
	}
	switch {
	case isFound && !missing:
		return vars.body, true, failed, nil
	case missing && !isFound:
		return nil, false, failed, nil
	}
	return nil, false, nil, failed("found is %t and missing is %t: exactly one must hold", isFound, missing)
}

// scrub replaces every secret (each {env.*} value) in s.
func (e *Effect) scrub(s string) string {
	for _, secret := range e.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}

// scrubError scrubs a classified error's message, keeping its class.
func (e *Effect) scrubError(err error) error {
	var ce *effects.Error
	if !errors.As(err, &ce) {
		return errors.New(e.scrub(err.Error()))
	}
	scrubbed := *ce
	scrubbed.Err = errors.New(e.scrub(ce.Err.Error()))
	return &scrubbed
}

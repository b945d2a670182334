package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// Error codes of upstream calls (docs/effects.md, "In front of an MCP
// server").
const (
	CodeUpstreamUnavailable   = "upstream_unavailable"
	CodeUpstreamUnauthorized  = "upstream_unauthorized"
	CodeUpstreamRefused       = "upstream_refused"
	CodeUpstreamInputRequired = "upstream_input_required"
	CodeUpstreamError         = "upstream_error"
	CodeUpstreamIsError       = "upstream_is_error"
	CodeUpstreamLost          = "upstream_lost"
	CodeUpstreamDrift         = "upstream_drift"
	CodeUpstreamToolMissing   = "upstream_tool_missing"
	CodeUpstreamHTTPError     = "upstream_http_error"
	// CodeSentArgsUnrecorded is a call not sent because the arguments it
	// would send could not be recorded on its intent first.
	CodeSentArgsUnrecorded = "sent_args_unrecorded"
)

// tracerName names the tracer of upstream calls' spans: the package, as
// OpenTelemetry names an instrumentation scope.
const tracerName = "github.com/outbox-dev/outbox/internal/upstream"

// The capabilities of a recorded tool: the build breaks if a method drifts
// from its interface.
var (
	_ effects.Effect              = (*Tool)(nil)
	_ effects.AlwaysClaimer       = (*Tool)(nil)
	_ effects.ApprovalRuleChecker = (*Tool)(nil)
	_ effects.ArgsSchemaer        = (*Tool)(nil)
	_ effects.Checkpointer        = (*Tool)(nil)
	_ effects.Declarer            = (*Tool)(nil)
	_ effects.DedupeWindower      = (*Tool)(nil)
	_ effects.Describer           = (*Tool)(nil)
	_ effects.NamespaceScoper     = (*Tool)(nil)
	_ effects.Queuer              = (*Tool)(nil)
	_ effects.QueueSizer          = (*Tool)(nil)
	_ effects.Reconciler          = (*Tool)(nil)
	_ effects.RequestReconciler   = (*Tool)(nil)
	_ effects.Reserver            = (*Tool)(nil)
	_ effects.SentArgsRecorder    = (*Tool)(nil)
	_ effects.ToolNamer           = (*Tool)(nil)
	_ effects.UpstreamTooler      = (*Tool)(nil)
)

// Tool is a recorded upstream tool: an effect of its mirrored name
// whose attempt calls the upstream tool once.
type Tool struct {
	conn        *Conn
	decl        *ToolDecl // nil when undeclared (at most once)
	locked      *LockedTool
	name        string
	description string
	guarantee   effects.Guarantee
	schema      *jsonschema.Schema
	schemaJSON  json.RawMessage // mirrored: the upstream's without key_arg
	sha256      string

	// withdrawn is why calls wait (drift, a missing tool), or "".
	withdrawn atomic.Pointer[string]
	// missingSince is when the upstream was first seen without the tool
	// (Unix nanoseconds), 0 while it lists it: missing_grace runs from it.
	missingSince atomic.Int64

	// observe is told of every call's outcome, for
	// outbox_upstream_calls_total. Defaults to none.
	observe func(upstream, tool, outcome string)
}

var (
	_ effects.Effect            = (*Tool)(nil)
	_ effects.RequestReconciler = (*Tool)(nil)
	_ effects.Declarer          = (*Tool)(nil)
)

// Name implements effects.Effect: the mirrored name.
func (t *Tool) Name() string { return t.name }

// Guarantee implements effects.Effect.
func (t *Tool) Guarantee() effects.Guarantee { return t.guarantee }

// Tool is the MCP tool's name: the mirrored name.
func (t *Tool) Tool() string { return t.name }

// Description is the tool's description for agents: the declaration's, or
// the upstream's (cleaned and capped when pinned).
func (t *Tool) Description() string { return t.description }

// Title is the upstream's title of the tool, as pinned.
func (t *Tool) Title() string { return t.locked.Title }

// UpstreamAnnotations are the upstream's hints of the tool, as pinned: the
// MCP server keeps what they say the tool does, and states outbox's
// guarantee beside them.
func (t *Tool) UpstreamAnnotations() *mcp.ToolAnnotations { return t.locked.Annotations }

// ArgsSchema is the mirrored args' schema: the upstream's without key_arg.
func (t *Tool) ArgsSchema() json.RawMessage { return t.schemaJSON }

// UpstreamName is the upstream the tool belongs to.
func (t *Tool) UpstreamName() string { return t.conn.u.name }

// UpstreamTool is the tool's name at the upstream.
func (t *Tool) UpstreamTool() string { return t.locked.Name }

// Wait is how long a call of the tool waits for its intent's end.
func (t *Tool) Wait() time.Duration { return t.conn.u.wait }

// Queue implements effects.Queuer: an upstream's recorded tools share one
// River queue, upstream_<name>, whose workers are the upstream's processes
// x max_in_flight (Workers).
func (t *Tool) Queue() string { return QueueName(t.conn.u.name) }

// Namespaces are the namespaces that see the tool; empty means all.
func (t *Tool) Namespaces() []string { return t.conn.u.Namespaces() }

// Workers is the River workers the tool's queue gets.
func (t *Tool) Workers() int { return t.conn.u.Workers() }

// AlwaysClaim reports that every attempt is claimed before the upstream is
// called, and never batched, whatever the guarantee: a rescued batch could
// call an upstream while the first call still runs.
func (t *Tool) AlwaysClaim() bool { return true }

// DeclarationSHA256 implements effects.Declarer: the transport, the
// upstream tool's name, its pinned schema and its declaration, not the
// descriptions.
func (t *Tool) DeclarationSHA256() string { return t.sha256 }

// DedupeWindow implements effects.DedupeWindower for a key_arg tool: the
// declared window less the call's timeout, as a declared HTTP effect's, so
// that the worker's guard never resends a call that could reach the
// upstream after the window. A retry-safe tool has no window.
func (t *Tool) DedupeWindow() time.Duration {
	if t.decl != nil && t.decl.window > 0 {
		return max(t.decl.window-t.conn.u.timeout, 0)
	}
	// Repeating a retry-safe call changes nothing: no window to leave.
	return 100 * 365 * 24 * time.Hour
}

// CheckApprovalRule refuses an approval rule on the tool that names an
// argument its pinned schema does not have at the top level, or compares a
// non-numeric one with < or >: such a rule would never hold a call.
func (t *Tool) CheckApprovalRule(arg string, numeric bool) error {
	return effectfile.CheckApprovalRule(t.name, t.schemaJSON, arg, numeric)
}

// Withdraw makes calls wait not_sent with code (upstream_drift,
// upstream_tool_missing); "" restores the tool.
func (t *Tool) Withdraw(code string) {
	if code == CodeUpstreamToolMissing {
		t.missingSince.CompareAndSwap(0, time.Now().UnixNano())
	} else {
		t.missingSince.Store(0)
	}
	if code == "" {
		t.withdrawn.Store(nil)
		return
	}
	t.withdrawn.Store(&code)
}

// Withdrawn is why the tool's calls wait, or "".
func (t *Tool) Withdrawn() string {
	if p := t.withdrawn.Load(); p != nil {
		return *p
	}
	return ""
}

// withdrawnWaitMax bounds how long an intent of a withdrawn tool waits
// before its next look at the tool; the wait spends no attempt.
const withdrawnWaitMax = 5 * time.Second

// withdrawnError is the answer to an attempt of a withdrawn tool. Its
// intent waits, without spending attempts, until the next listing could
// restore the tool; a tool missing from the upstream for missing_grace
// (a clock of its own, from when this process first saw it gone) fails a
// never-sent intent, and keeps a possibly-sent one waiting not_sent, so
// that it ends unknown when its attempts run out, never failed.
func (t *Tool) withdrawnError(code string, req *effects.Request) error {
	err := fmt.Errorf("upstream %s tool %s is withdrawn (%s) until the operator pins it again (outboxd effects pin)", t.conn.u.name, t.locked.Name, code)
	// A listing may restore the tool at any moment (list_changed, or a
	// re-pin picked up), so the wait is bounded well below a refresh.
	wait := min(t.conn.u.refresh, withdrawnWaitMax)
	if code == CodeUpstreamToolMissing {
		if since := t.missingSince.Load(); since != 0 {
			left := t.conn.u.missingGrace - time.Since(time.Unix(0, since))
			switch {
			case left <= 0 && req.MaybeSent:
				return effects.NotSent(code, fmt.Errorf("%w; missing for more than missing_grace %s, and an earlier attempt may have acted", err, t.conn.u.missingGrace))
			case left <= 0:
				return effects.Permanent(code, fmt.Errorf("%w; missing for more than missing_grace %s, and nothing was sent", err, t.conn.u.missingGrace))
			}
			wait = min(wait, left)
		}
	}
	return effects.NotSentRetryAfter(code, err, wait)
}

// ValidateArgs implements effects.Effect: the mirrored schema, with a
// marker of the longest length applied, so a maxLength cannot be broken at
// send time; a call that passes key_arg is refused, outbox sets it.
func (t *Tool) ValidateArgs(args json.RawMessage) error {
	var inst map[string]any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&inst); err != nil || inst == nil {
		return &effects.ArgError{Message: "must be a JSON object"}
	}
	if t.decl != nil && t.decl.keyArg != "" {
		if _, ok := inst[t.decl.keyArg]; ok {
			return &effects.ArgError{Field: t.decl.keyArg, Message: "outbox sets it (the provider key): leave it out"}
		}
	}
	if t.decl != nil && t.decl.marker != nil {
		v, present := inst[t.decl.marker.arg]
		s, isString := v.(string)
		if present && v != nil && !isString {
			// The marker is text added to a string: anything else would be
			// replaced by it at send time.
			return &effects.ArgError{Field: t.decl.marker.arg, Message: "must be a string (outbox adds its marker to it)"}
		}
		inst[t.decl.marker.arg] = s + strings.Repeat("x", t.decl.marker.length())
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(mustJSON(inst)))
	if err != nil {
		return &effects.ArgError{Message: "must be a JSON object"}
	}
	if err := t.schema.Validate(v); err != nil {
		var verr *jsonschema.ValidationError
		if errors.As(err, &verr) {
			return effectfile.SchemaArgError(verr)
		}
		return &effects.ArgError{Message: err.Error()}
	}
	return nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// callArgs returns the arguments sent upstream: the caller's, with the
// marker applied and key_arg set, numbers kept as written.
func (t *Tool) callArgs(args json.RawMessage, providerKey string) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, effects.Permanent(effects.CodeInvalidArgs, fmt.Errorf("tool %s: args are not a JSON object", t.name))
	}
	if t.decl == nil {
		return m, nil
	}
	if t.decl.keyArg != "" {
		m[t.decl.keyArg] = providerKey
	}
	if mk := t.decl.marker; mk != nil {
		s, _ := m[mk.arg].(string)
		if mk.prepend {
			s = mk.render(providerKey) + s
		} else {
			s += mk.render(providerKey)
		}
		m[mk.arg] = s
	}
	return m, nil
}

// RecordsSentArgs implements effects.SentArgsRecorder: the upstream
// receives the caller's arguments with the marker and key_arg applied,
// which each attempt records before its call.
func (t *Tool) RecordsSentArgs() bool { return true }

// recordSent records args, scrubbed of the upstream's secrets, as what
// req's attempt sends: before the call, so that an attempt that dies
// mid-call leaves them on its intent. Not recorded, the call is not sent.
func (t *Tool) recordSent(ctx context.Context, req *effects.Request, args map[string]any) error {
	if req.RecordSentFunc == nil {
		return nil
	}
	scrubbed, _, err := t.conn.u.scrubJSON(args)
	var raw []byte
	if err == nil {
		raw, err = effectfile.MarshalJSON(scrubbed)
	}
	if err == nil {
		err = req.RecordSentFunc(ctx, raw)
	}
	if err != nil {
		return effects.NotSent(CodeSentArgsUnrecorded, fmt.Errorf("upstream %s tool %s: not called: the arguments to send could not be recorded on the intent: %w", t.conn.u.name, t.locked.Name, err))
	}
	return nil
}

// Reserve implements effects.Reserver: a call slot and a session of the
// tool's upstream (the child started, or the HTTP session opened), taken
// before the worker claims the intent, for the attempt's look-up and call.
func (t *Tool) Reserve(ctx context.Context) (context.Context, func()) {
	return t.conn.reserve(ctx)
}

// Execute implements effects.Effect: one call of the upstream tool.
func (t *Tool) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	if code := t.Withdrawn(); code != "" {
		return nil, t.withdrawnError(code, req)
	}
	args, err := t.callArgs(req.Args, req.ProviderKey)
	if err != nil {
		return nil, err
	}
	outcome := "succeeded"
	defer func() {
		if t.observe != nil {
			t.observe(t.conn.u.name, t.locked.Name, outcome)
		}
	}()
	if len(req.Checkpoint) > 0 {
		// An earlier attempt's call was answered with a task: poll it,
		// never call again.
		result, err := t.resumeTask(ctx, req)
		if err != nil {
			class, code := effects.Classify(err)
			outcome = string(class) + ":" + code
		}
		return result, err
	}
	if err := t.recordSent(ctx, req, args); err != nil {
		class, code := effects.Classify(err)
		outcome = string(class) + ":" + code
		return nil, err
	}
	callCtx, slot := withTaskSlot(ctx)
	res, rpcErr, err := t.conn.call(callCtx, t.locked.Name, args, t.guarantee)
	if err != nil {
		class, code := effects.Classify(err)
		outcome = string(class) + ":" + code
		return nil, err
	}
	var result json.RawMessage
	if raw := slot.get(); raw != nil && rpcErr == nil {
		result, err = t.executeTask(ctx, req, raw)
	} else {
		result, err = t.classify(res, rpcErr, req)
	}
	if err != nil {
		class, code := effects.Classify(err)
		outcome = string(class) + ":" + code
	}
	return result, err
}

// classify turns an upstream's answer (a result or a JSON-RPC error) into
// a stored result or a classified error: the tool's rules first, then the
// default classes.
func (t *Tool) classify(res *mcp.CallToolResult, rpcErr *jsonrpc.Error, req *effects.Request) (json.RawMessage, error) {
	vars := &mcpVars{providerKey: req.ProviderKey}
	_ = json.Unmarshal(req.Args, &vars.args)
	if res != nil {
		vars.result = newCELResult(res)
	} else {
		vars.err = &celError{Code: int64(rpcErr.Code), Message: rpcErr.Message, Data: structValue(rawOrNil(rpcErr.Data))}
	}
	describe := func() string {
		if rpcErr != nil {
			return fmt.Sprintf("upstream %s tool %s: JSON-RPC error %d: %s", t.conn.u.name, t.locked.Name, rpcErr.Code, t.errorText(rpcErr.Message))
		}
		return fmt.Sprintf("upstream %s tool %s answered isError: %s", t.conn.u.name, t.locked.Name, t.errorText(contentText(res)))
	}
	if t.decl != nil {
		act := vars.activation(nil)
		for _, r := range t.decl.rules {
			ok, err := r.When.EvalBool(act)
			if err != nil || !ok {
				continue
			}
			code := r.Code
			switch r.Class {
			case effectfile.ClassSuccess:
				if res == nil {
					return t.storeError(rpcErr)
				}
				return t.store(res)
			case effectfile.ClassNotSent:
				return nil, effects.NotSent(orDefaultCode(code, CodeUpstreamError), errors.New(describe()))
			case effectfile.ClassPermanent:
				return nil, effects.Permanent(orDefaultCode(code, CodeUpstreamRefused), errors.New(describe()))
			default:
				return nil, effects.Ambiguous(orDefaultCode(code, CodeUpstreamError), errors.New(describe()))
			}
		}
	}
	if rpcErr != nil {
		switch rpcErr.Code {
		case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
			return nil, effects.Permanent(CodeUpstreamRefused, errors.New(describe()))
		case codeURLElicitationRequired:
			return nil, effects.Permanent(CodeUpstreamInputRequired, errors.New(describe()))
		}
		return nil, effects.Ambiguous(CodeUpstreamError, errors.New(describe()))
	}
	if res.NeedsInput() {
		return nil, effects.Permanent(CodeUpstreamInputRequired, fmt.Errorf("upstream %s tool %s asked for input, which outbox never gives", t.conn.u.name, t.locked.Name))
	}
	if res.IsError {
		// A tool's error text may hide a write: rules turn known refusals
		// into permanent ones.
		return nil, effects.Ambiguous(CodeUpstreamIsError, errors.New(describe()))
	}
	return t.store(res)
}

// codeURLElicitationRequired is the JSON-RPC error an upstream answers when
// it needs a person's input (MCP's URLElicitationRequired).
const codeURLElicitationRequired = -32042

func orDefaultCode(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func rawOrNil(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

// errorText scrubs and caps an upstream's error text for the intent.
func (t *Tool) errorText(s string) string {
	s = t.conn.u.scrub(s)
	if len(s) > effectfile.ErrorTextMax {
		s = strings.ToValidUTF8(s[:effectfile.ErrorTextMax], "") + "..."
	}
	return s
}

func contentText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			if b.Len() > 0 {
				b.WriteString(" ")
			}
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// storedResult is what a recorded call keeps of the upstream's answer, and
// what every answer to the agent is built from.
type storedResult struct {
	Content           []map[string]any `json:"content"`
	StructuredContent any              `json:"structuredContent,omitempty"`
	Truncated         bool             `json:"truncated,omitempty"`
	Reconciled        bool             `json:"reconciled,omitempty"`
	// ID is the upstream's object id when its answer names one, for the
	// console and River UI.
	ID any `json:"id,omitempty"`
}

// store keeps a successful answer: text scrubbed and truncated at
// result_max, binary blocks as their type, size and hash.
func (t *Tool) store(res *mcp.CallToolResult) (json.RawMessage, error) {
	out := storedResult{Content: []map[string]any{}}
	budget := t.conn.u.resultMax
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			s := t.conn.u.scrub(c.Text)
			if len(s) > budget {
				s, out.Truncated = strings.ToValidUTF8(s[:max(budget, 0)], ""), true
			}
			budget -= len(s)
			out.Content = append(out.Content, map[string]any{"type": "text", "text": s})
		case *mcp.ImageContent:
			out.Content = append(out.Content, binaryBlock("image", c.MIMEType, c.Data))
		case *mcp.AudioContent:
			out.Content = append(out.Content, binaryBlock("audio", c.MIMEType, c.Data))
		case *mcp.ResourceLink:
			out.Content = append(out.Content, map[string]any{"type": "resource_link", "uri": c.URI, "name": c.Name, "mimeType": c.MIMEType})
		case *mcp.EmbeddedResource:
			var data []byte
			mime := ""
			if c.Resource != nil {
				data, mime = append([]byte(c.Resource.Text), c.Resource.Blob...), c.Resource.MIMEType
			}
			out.Content = append(out.Content, binaryBlock("resource", mime, data))
		}
	}
	if res.StructuredContent != nil {
		if v, raw, err := t.conn.u.scrubJSON(res.StructuredContent); err == nil {
			if len(raw) > budget {
				out.Truncated = true
			} else {
				out.StructuredContent = v
			}
		}
	}
	if m, ok := out.StructuredContent.(map[string]any); ok {
		out.ID = m["id"]
	}
	return json.Marshal(out)
}

// scrubJSON returns v, a JSON value, with the upstream's secrets replaced
// in every string and member name, and its encoding. It scrubs the decoded
// strings, not the encoded text, where JSON's escapes (a quote, a
// backslash, <, > and &) would hide a secret holding those characters.
func (u *Upstream) scrubJSON(v any) (any, []byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var plain any
	if err := dec.Decode(&plain); err != nil {
		return nil, nil, err
	}
	plain = u.scrubValue(plain)
	raw, err = json.Marshal(plain)
	return plain, raw, err
}

func (u *Upstream) scrubValue(v any) any {
	switch v := v.(type) {
	case string:
		return u.scrub(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[u.scrub(k)] = u.scrubValue(item)
		}
		return out
	case []any:
		for i, item := range v {
			v[i] = u.scrubValue(item)
		}
		return v
	}
	return v
}

// storeError keeps a JSON-RPC error a success rule accepted ("already
// exists" for a retry-safe tool).
func (t *Tool) storeError(rpcErr *jsonrpc.Error) (json.RawMessage, error) {
	return json.Marshal(storedResult{Content: []map[string]any{{"type": "text", "text": t.errorText(rpcErr.Message)}}})
}

func binaryBlock(kind, mime string, data []byte) map[string]any {
	sum := sha256.Sum256(data)
	return map[string]any{"type": kind, "mimeType": mime, "bytes": len(data), "sha256": hex.EncodeToString(sum[:])}
}

// call calls an upstream tool once: a slot and a session within
// connect_timeout (else not_sent, nothing claimed beyond the attempt), then
// the request, bounded by the upstream's timeout from its write. A result
// or a JSON-RPC error is returned for classification; anything else is a
// classified error.
func (c *Conn) call(ctx context.Context, tool string, args map[string]any, g effects.Guarantee) (*mcp.CallToolResult, *jsonrpc.Error, error) {
	m, s, release, err := c.take(ctx)
	if err != nil {
		return nil, nil, effects.NotSent(CodeUpstreamUnavailable, err)
	}
	defer release()
	if c.withdrawn != nil {
		if code := c.withdrawn(tool); code != "" {
			return nil, nil, effects.NotSent(code, fmt.Errorf("upstream %s tool %s is withdrawn (%s) until the operator pins it again (outboxd effects pin)", c.u.name, tool, code))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.u.timeout)
	defer cancel()
	// A client span under the attempt's, from its tracer provider (a no-op
	// with traces off): the tool's names, never its arguments.
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, "tools/call "+tool,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", tool),
			attribute.String("outbox.upstream", c.u.name)))
	defer span.End()
	ctx, probe := withProbe(ctx)
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	// The trace continues at the upstream: W3C trace context in _meta, as
	// MCP's hosts send it.
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if tp := carrier.Get("traceparent"); tp != "" {
		params.Meta = mcp.Meta{"traceparent": tp}
	}
	res, err := s.CallTool(ctx, params)
	if err == nil {
		if res.IsError {
			span.SetStatus(codes.Error, "isError")
		}
		return res, nil, nil
	}
	span.SetStatus(codes.Error, "call failed")
	probe.mu.Lock()
	attempted, written, status, retryAfter := probe.attempted, probe.written, probe.status, probe.retryAfter
	probe.mu.Unlock()
	text := c.u.scrub(err.Error())
	if c.u.Stdio() && !written {
		// Refused before the child could read it: the session was closed,
		// or the pipe broken before the write.
		m.markGoneIfClosed(s)
		return nil, nil, effects.NotSent(CodeUpstreamUnavailable, fmt.Errorf("upstream %s: the request was not written: %s", c.u.name, text))
	}
	if !c.u.Stdio() {
		switch {
		case !attempted || !written:
			return nil, nil, effects.NotSent(CodeUpstreamUnavailable, fmt.Errorf("upstream %s: the request was not written: %s", c.u.name, text))
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			return nil, nil, effects.NotSent(CodeUpstreamUnauthorized, fmt.Errorf("upstream %s answered %d", c.u.name, status))
		case status == http.StatusNotFound:
			m.markGone(s)
			return nil, nil, effects.NotSent(CodeUpstreamUnavailable, fmt.Errorf("upstream %s: the session is gone (404); a new one follows", c.u.name))
		case status == http.StatusTooManyRequests:
			return nil, nil, effects.NotSentRetryAfter(CodeUpstreamUnavailable, fmt.Errorf("upstream %s answered 429", c.u.name), retryAfter)
		case status == http.StatusRequestTimeout || status == http.StatusTooEarly || status == http.StatusServiceUnavailable:
			if g == effects.GuaranteeAtMostOnce {
				return nil, nil, effects.Ambiguous(CodeUpstreamHTTPError, fmt.Errorf("upstream %s answered %d", c.u.name, status))
			}
			return nil, nil, effects.NotSentRetryAfter(CodeUpstreamUnavailable, fmt.Errorf("upstream %s answered %d", c.u.name, status), retryAfter)
		case status != 0 && (status < 200 || status > 299):
			return nil, nil, effects.Ambiguous(CodeUpstreamHTTPError, fmt.Errorf("upstream %s answered %d", c.u.name, status))
		}
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return nil, rpcErr, nil
	}
	// A timeout, a dropped stream, a child that exited: the call may have
	// acted. Cancellation was sent, and is no proof of anything.
	m.markGoneIfClosed(s)
	return nil, nil, effects.Ambiguous(CodeUpstreamLost, fmt.Errorf("upstream %s tool %s: the outcome was lost: %s", c.u.name, tool, text))
}

// markGone drops a session the upstream ended.
func (m *member) markGone(s *mcp.ClientSession) {
	m.mu.Lock()
	if m.session == s {
		m.gone = true
	}
	m.mu.Unlock()
	go func() { _ = s.Close() }()
}

// markGoneIfClosed drops a session that no longer answers a ping (a
// child that died, a stream the upstream closed), so the next call
// connects anew instead of failing on it.
func (m *member) markGoneIfClosed(s *mcp.ClientSession) {
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := s.Ping(ctx, nil); err != nil {
		m.markGone(s)
	}
}

// pingTimeout bounds the ping that checks a session after a lost call.
const pingTimeout = 2 * time.Second

// LookupRequest implements effects.RequestReconciler: it calls the
// look-up tool and finds the marker. An error, an isError answer or items
// that are not a list is lookup_failed, never "not found"; "not found"
// counts only settle after the intent's last possible send.
func (t *Tool) LookupRequest(ctx context.Context, req *effects.Request, createdAt time.Time) (json.RawMessage, bool, error) {
	d := t.decl.lookup
	if d.http != nil {
		return t.lookupHTTP(ctx, req, createdAt)
	}
	failed := func(format string, args ...any) error {
		return fmt.Errorf("lookup_failed: upstream %s tool %s: look-up through %s: %s", t.conn.u.name, t.locked.Name, d.tool, t.conn.u.scrub(fmt.Sprintf(format, args...)))
	}
	dec := json.NewDecoder(bytes.NewReader(req.Args))
	dec.UseNumber()
	var args any
	if err := dec.Decode(&args); err != nil {
		return nil, false, failed("args are not JSON")
	}
	rc := &effectfile.RenderCtx{Args: args, ProviderKey: req.ProviderKey}
	if !createdAt.IsZero() {
		rc.CreatedAt = createdAt.UTC().Format(time.RFC3339)
	}
	callArgs := map[string]any{}
	for _, kv := range d.args {
		v, ok, err := d.argT[kv.Key].RenderValue(rc)
		if err != nil {
			return nil, false, failed("%v", err)
		}
		if ok {
			callArgs[kv.Key] = v
		}
	}
	res, rpcErr, err := t.conn.call(ctx, d.tool, callArgs, effects.GuaranteeDeduplicated)
	switch {
	case err != nil:
		return nil, false, failed("%v", err)
	case rpcErr != nil:
		return nil, false, failed("JSON-RPC error %d: %s", rpcErr.Code, rpcErr.Message)
	case res.IsError:
		return nil, false, failed("isError: %s", contentText(res))
	}
	vars := &mcpVars{result: newCELResult(res), providerKey: req.ProviderKey}
	_ = json.Unmarshal(req.Args, &vars.args)
	act := vars.activation(nil)
	var (
		found     bool
		foundItem any
		// answer is the look-up's own answer, stored when a found rule
		// matched an answer with no JSON data (markdown, plain text).
		answer json.RawMessage
	)
	if d.items != nil {
		items, err := d.items.EvalList(act)
		if err != nil {
			return nil, false, failed("items: %v", err)
		}
		for _, item := range items {
			ok, err := d.match.EvalBool(vars.activation(item))
			if err != nil {
				return nil, false, failed("match: %v", err)
			}
			if ok {
				found, foundItem = true, plainJSON(item)
				break
			}
		}
	} else {
		isFound, err1 := d.found.EvalBool(act)
		missing, err2 := d.missing.EvalBool(act)
		if err := errors.Join(err1, err2); err != nil {
			return nil, false, failed("%v", err)
		}
		switch {
		case isFound && !missing:
			// Found whatever the answer's form: a rule that matched a
			// markdown answer, which has no data, is no "not found".
			found, foundItem = true, plainJSON(vars.result.Data)
			if foundItem == nil {
				if answer, err = t.store(res); err != nil {
					return nil, false, failed("%v", err)
				}
			}
		case missing && !isFound:
		default:
			return nil, false, failed("found is %t and missing is %t: exactly one must hold", isFound, missing)
		}
	}
	if answer != nil {
		var out storedResult
		if err := json.Unmarshal(answer, &out); err != nil {
			return nil, false, failed("%v", err)
		}
		out.Reconciled = true
		raw, err := json.Marshal(out)
		return raw, err == nil, err
	}
	if !found {
		return nil, false, t.notFound(req, createdAt, failed)
	}
	return t.found(foundItem, d.result, failed)
}

// notFound is a look-up's "not found": nil once it counts, else a
// lookup_failed error from failed. For an upstream whose reads lag its
// writes, "not found" counts only once settle passed since the last
// attempt that may have sent ended, whenever it was sent (after an
// approval, a backlog, not_sent retries). Without that attempt's end, the
// intent's creation plus the call's timeout bounds a first attempt's send.
func (t *Tool) notFound(req *effects.Request, createdAt time.Time, failed func(string, ...any) error) error {
	var since time.Duration
	switch {
	case !req.LastAttemptEnd.IsZero():
		since = time.Since(req.LastAttemptEnd)
	case !createdAt.IsZero():
		since = time.Since(createdAt) - t.conn.u.timeout
	default:
		since = t.decl.settle
	}
	if t.decl.settle > 0 && since < t.decl.settle {
		return failed("not found yet; settling for %s", t.decl.settle)
	}
	return nil
}

// found is the stored result of a look-up that found the call: item (the
// matched item, or the answer), or the members result picks from it,
// scrubbed.
func (t *Tool) found(item any, result []effectfile.ResultField, failed func(string, ...any) error) (json.RawMessage, bool, error) {
	out := storedResult{Reconciled: true, StructuredContent: item}
	if len(result) > 0 {
		picked, err := effectfile.Extract(result, item)
		if err != nil {
			return nil, false, failed("%v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(picked))
		dec.UseNumber()
		var v any
		_ = dec.Decode(&v)
		out.StructuredContent = v
	}
	scrubbed, text, err := t.conn.u.scrubJSON(out.StructuredContent)
	if err != nil {
		return nil, false, failed("%v", err)
	}
	out.StructuredContent = scrubbed
	out.Content = []map[string]any{{"type": "text", "text": string(text)}}
	if m, ok := out.StructuredContent.(map[string]any); ok {
		out.ID = m["id"]
	}
	raw, err := json.Marshal(out)
	return raw, err == nil, err
}

// lookupHTTP is LookupRequest for an HTTP look-up: the request declared
// as a declared HTTP effect's look-up, read the same way, with the same
// settle and stored result as a look-up through a tool.
func (t *Tool) lookupHTTP(ctx context.Context, req *effects.Request, createdAt time.Time) (json.RawMessage, bool, error) {
	h := t.decl.lookup.http
	failed := func(format string, args ...any) error {
		return fmt.Errorf("lookup_failed: upstream %s tool %s: look-up at %s: %s", t.conn.u.name, t.locked.Name, h.URLTemplate(), t.conn.u.scrub(fmt.Sprintf(format, args...)))
	}
	item, found, err := h.Find(ctx, req, createdAt)
	switch {
	case err != nil:
		return nil, false, errors.New(t.conn.u.scrub(err.Error()))
	case !found:
		return nil, false, t.notFound(req, createdAt, failed)
	}
	return t.found(item, h.Result(), failed)
}

// Lookup implements effects.Reconciler; the worker prefers LookupRequest,
// which has the intent's arguments.
func (t *Tool) Lookup(ctx context.Context, providerKey string) (json.RawMessage, bool, error) {
	return t.LookupRequest(ctx, &effects.Request{Args: json.RawMessage(`{}`), ProviderKey: providerKey}, time.Time{})
}

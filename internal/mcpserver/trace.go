package mcpserver

import (
	"context"
	"errors"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the tool calls' spans.
const tracerName = "github.com/outbox-dev/outbox/internal/mcpserver"

// methodCallTool is the MCP method of a tool call.
const methodCallTool = "tools/call"

// The attributes of the OpenTelemetry GenAI and MCP conventions that a tool
// call's span carries. They left the core semconv packages after v1.41.0
// (the GenAI conventions live in a repository of their own), so they are
// spelt here rather than taken from an older semconv package.
const (
	attrGenAIOperationName = attribute.Key("gen_ai.operation.name")
	attrGenAIToolCallID    = attribute.Key("gen_ai.tool.call.id")
	attrGenAIToolName      = attribute.Key("gen_ai.tool.name")
	attrMCPMethodName      = attribute.Key("mcp.method.name")
	attrMCPProtocolVersion = attribute.Key("mcp.protocol.version")
	attrMCPSessionID       = attribute.Key("mcp.session.id")
)

// operationExecuteTool is gen_ai.operation.name of a tool call, and the
// first word of its span's name.
const operationExecuteTool = "execute_tool"

// toolCallIDMetaKey is the params._meta entry that names the model's tool
// call, recorded as gen_ai.tool.call.id. MCP has no field for it: the id
// the model gave the call stays with the host. Claude Code sends it under
// this key on every tools/call (the tool_use block's id, "toolu_..."); Codex
// sends it only to its own apps server (_meta._codex_apps.call_id), and
// other hosts' proposals (copilot/toolCallId, a gateway's
// redpanda.com/llm-tool-call-id) have not shipped. One key, then, until a
// vendor-neutral one is agreed.
const toolCallIDMetaKey = "claudecode/toolUseId"

// toolCallIDMaxLength bounds the gen_ai.tool.call.id recorded: a host's id
// is a few dozen characters, and a longer value is not one.
const toolCallIDMaxLength = 255

// toolErrorTypeDefault is error.type of a tool error that carries no code
// of its own: the MCP conventions' value for a result with isError.
const toolErrorTypeDefault = "tool_error"

// traceToolCalls returns a receiving middleware that runs every tools/call
// (the mutating tools and the read tools alike) inside a span
// "execute_tool {tool}" of tracer, following the GenAI conventions. The
// handler, and so the enqueue the call makes, runs with the span's context:
// the intent records the span as its origin (its traceparent).
//
// The span's parent is the trace context the host sent in params._meta
// (traceparent and tracestate, MCP SEP-414) when it sent a valid one;
// otherwise the span the context already holds (over HTTP, the HTTP
// server's), or none. A _meta parent takes precedence because it names the
// host's own tool call span, which is more precise than the HTTP request
// that happened to carry the message; the HTTP span is then linked.
//
// tools are the names of the tools the server lists: a call of any other
// name is answered with a protocol error, and its span is named
// "execute_tool" alone, so that a client's made-up names never reach span
// names or attributes.
//
// Nothing of the call's arguments is recorded (they hold personal data, and
// the idempotency key), nor an error's message (a database error can quote
// a key), nor the request's headers (a token): only names, ids and codes.
func traceToolCalls(tracer trace.Tracer, tools []string) mcp.Middleware {
	// The spans' names, made once: a call with traces off allocates as
	// little as it can.
	spanNames := make(map[string]string, len(tools))
	for _, name := range tools {
		spanNames[name] = operationExecuteTool + " " + name
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			call, ok := req.(*mcp.CallToolRequest)
			if method != methodCallTool || !ok || call.Params == nil {
				return next(ctx, method, req)
			}
			ctx, span, toolErrorType := startToolCallSpan(ctx, tracer, spanNames, call)
			defer span.End()
			res, err := next(ctx, method, req)
			if toolErrorType != nil {
				if errType := callErrorType(res, err, *toolErrorType); errType != "" {
					span.SetAttributes(semconv.ErrorTypeKey.String(errType))
					// The code alone describes the status: a message can
					// quote arguments or a key.
					span.SetStatus(codes.Error, errType)
				}
			}
			return res, err
		}
	}
}

// spanKindInternal is the tool call spans' option, shared: a call need not
// allocate it.
var spanKindInternal = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

// startToolCallSpan starts call's span; spanNames are the span names of
// the server's tools. When the span records, it returns too where the
// call's handler notes a tool error's code (noteToolError); nil otherwise.
func startToolCallSpan(ctx context.Context, tracer trace.Tracer, spanNames map[string]string, call *mcp.CallToolRequest,
) (context.Context, trace.Span, *string) {
	name := call.Params.Name
	spanName, known := spanNames[name]
	if !known {
		spanName = operationExecuteTool
	}
	var span trace.Span
	if remote := hostTraceContext(ctx, call.Params.Meta); remote != nil {
		opts := spanKindInternal
		if local := trace.SpanContextFromContext(ctx); local.IsValid() {
			opts = []trace.SpanStartOption{spanKindInternal[0], trace.WithLinks(trace.Link{SpanContext: local})}
		}
		ctx, span = tracer.Start(remote, spanName, opts...)
	} else {
		ctx, span = tracer.Start(ctx, spanName, spanKindInternal...)
	}
	// Attributes are built only for a span that records: with traces off
	// (a no-op provider) a call costs the no-op span and nothing more.
	if !span.IsRecording() {
		return ctx, span, nil
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs,
		attrGenAIOperationName.String(operationExecuteTool),
		attrMCPMethodName.String(methodCallTool),
	)
	if known {
		attrs = append(attrs, attrGenAIToolName.String(name))
	}
	if id, ok := call.Params.Meta[toolCallIDMetaKey].(string); ok && id != "" && len(id) <= toolCallIDMaxLength {
		attrs = append(attrs, attrGenAIToolCallID.String(id))
	}
	// The session id is not a credential: over HTTP with tokens the SDK
	// serves a session only to the token that opened it.
	if call.Session != nil {
		if id := call.Session.ID(); id != "" {
			attrs = append(attrs, attrMCPSessionID.String(id))
		}
	}
	if v := call.ProtocolVersion(); v != "" {
		attrs = append(attrs, attrMCPProtocolVersion.String(v))
	}
	// jsonrpc.request.id is left out: SDK v1.8.0 keeps the request's id in
	// an unexported context key.
	span.SetAttributes(attrs...)
	toolErrorType := new(string)
	return context.WithValue(ctx, toolErrorTypeKey{}, toolErrorType), span, toolErrorType
}

// hostTraceContext returns ctx with the remote span context the host sent
// in meta (params._meta: traceparent and tracestate, W3C Trace Context), or
// nil when it sent none or an invalid one.
func hostTraceContext(ctx context.Context, meta mcp.Meta) context.Context {
	traceparent, ok := meta["traceparent"].(string)
	if !ok {
		return nil
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate, ok := meta["tracestate"].(string); ok {
		carrier["tracestate"] = tracestate
	}
	// Only the W3C trace context, whatever the process's global
	// propagator: it is what SEP-414 puts in _meta. Baggage from a host is
	// not taken in.
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		return nil
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// toolErrorTypeKey is the context key under which a recording tool call
// span awaits the code of the tool error its handler answers (noteToolError).
type toolErrorTypeKey struct{}

// noteToolError tells the span of the tool call running in ctx, if it
// records, the code of the tool error the call answers: its error.type.
func noteToolError(ctx context.Context, code string) {
	if p, ok := ctx.Value(toolErrorTypeKey{}).(*string); ok {
		*p = code
	}
}

// callErrorType returns the error.type of a tool call's outcome, or "" for
// a success: for a tool error (isError) its code as the handler noted it,
// or tool_error; for a protocol error (an unknown tool, for instance) its
// JSON-RPC code, as the MCP conventions say; for any other error its Go
// type.
func callErrorType(res mcp.Result, err error, noted string) string {
	if err != nil {
		if rpcErr, ok := errors.AsType[*jsonrpc.Error](err); ok {
			return strconv.FormatInt(rpcErr.Code, 10)
		}
		return semconv.ErrorType(err).Value.AsString()
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		if noted != "" {
			return noted
		}
		return toolErrorTypeDefault
	}
	return ""
}

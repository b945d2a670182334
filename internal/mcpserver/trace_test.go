package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/mcpserver"
)

// The trace context a host sends in params._meta in these tests.
const (
	hostTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	hostSpanID     = "00f067aa0ba902b7"
	hostTraceState = "vendor=opaque"
	hostToolUseID  = "toolu_01A09q90qw90lq917835lq9"
)

// hostMeta is a tools/call's _meta as a tracing host sends it: its tool
// call span's trace context (SEP-414), and Claude Code's id of the call.
func hostMeta() mcp.Meta {
	return mcp.Meta{
		"traceparent":          "00-" + hostTraceID + "-" + hostSpanID + "-01",
		"tracestate":           hostTraceState,
		"claudecode/toolUseId": hostToolUseID,
	}
}

type traceBundle struct {
	*testBundle
	provider *sdktrace.TracerProvider
	recorder *tracetest.SpanRecorder
}

func setupTrace(t *testing.T) *traceBundle {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = provider.Shutdown(t.Context()) })
	return &traceBundle{testBundle: setup(t), provider: provider, recorder: recorder}
}

// connect connects an SDK client over in-memory transports to a server
// tracing with the bundle's provider.
func (b *traceBundle) connect(t *testing.T) *mcp.ClientSession {
	t.Helper()
	return b.testBundle.connect(t, &mcpserver.Config{TracerProvider: b.provider})
}

// connectHTTP connects an SDK client over streamable HTTP, stateless as
// the HTTP API serves it, to a server tracing with the bundle's provider.
// Each HTTP request runs in a server span of its own, as otelhttp makes
// one. A token non-empty is required as a bearer token of role agent.
func (b *traceBundle) connectHTTP(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	server, err := mcpserver.New(b.pool, b.client, &mcpserver.Config{TracerProvider: b.provider})
	require.NoError(t, err)
	handler := http.Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	if token != "" {
		handler = auth.RequireBearerToken(func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
			if got != token {
				return nil, auth.ErrInvalidToken
			}
			return &auth.TokenInfo{Scopes: []string{access.RoleAgent.String()}, UserID: "alice", Expiration: time.Now().Add(time.Hour)}, nil
		}, nil)(handler)
	}
	tracer := b.provider.Tracer("test/http")
	httpServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), "POST /mcp", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		handler.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(httpServer.Close)
	transport := &mcp.StreamableClientTransport{
		Endpoint:             httpServer.URL,
		HTTPClient:           &http.Client{Transport: bearerTransport{token: token}},
		DisableStandaloneSSE: true,
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), transport, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

type bearerTransport struct{ token string }

func (bt bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if bt.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+bt.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// spans returns the ended spans named name.
func (b *traceBundle) spans(name string) []sdktrace.ReadOnlySpan {
	var found []sdktrace.ReadOnlySpan
	for _, s := range b.recorder.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	return found
}

// span returns the one ended span named name.
func (b *traceBundle) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	found := b.spans(name)
	require.Len(t, found, 1, "spans named %q", name)
	return found[0]
}

// attributes returns a span's attributes, each value as a string.
func attributes(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// traceparentOf reads the traceparent the intent of key recorded.
func (b *traceBundle) traceparentOf(t *testing.T, key string) *string {
	t.Helper()
	var tp *string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT traceparent FROM "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+" WHERE key = $1", key).Scan(&tp))
	return tp
}

func TestToolCallSpans(t *testing.T) {
	t.Parallel()

	// A host that traces sends its tool call span's context in _meta: the
	// execute_tool span continues that trace, and the intent the call
	// enqueued records the execute_tool span.
	t.Run("HostTraceContext", func(t *testing.T) {
		t.Parallel()
		bundle := setupTrace(t)
		cs := bundle.connect(t)
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{
			Meta: hostMeta(), Name: "charge_card", Arguments: charge("idempotency_key", "traced-1"),
		})
		require.NoError(t, err)
		require.False(t, res.IsError, text(res))

		span := bundle.span(t, "execute_tool charge_card")
		require.Equal(t, trace.SpanKindInternal, span.SpanKind())
		require.Equal(t, hostTraceID, span.SpanContext().TraceID().String())
		require.Equal(t, hostTraceID, span.Parent().TraceID().String())
		require.Equal(t, hostSpanID, span.Parent().SpanID().String())
		require.True(t, span.Parent().IsRemote())
		require.Equal(t, hostTraceState, span.SpanContext().TraceState().String())
		require.Empty(t, span.Links(), "the in-memory transport's context holds no span to link")
		attrs := attributes(span)
		require.Equal(t, "execute_tool", attrs["gen_ai.operation.name"])
		require.Equal(t, "charge_card", attrs["gen_ai.tool.name"])
		require.Equal(t, hostToolUseID, attrs["gen_ai.tool.call.id"])
		require.Equal(t, "tools/call", attrs["mcp.method.name"])
		require.NotEmpty(t, attrs["mcp.protocol.version"])
		require.NotContains(t, attrs, "error.type")
		require.Equal(t, codes.Unset, span.Status().Code)

		tp := bundle.traceparentOf(t, "traced-1")
		require.NotNil(t, tp, "the enqueue ran in the execute_tool span")
		require.Equal(t, "00-"+hostTraceID+"-"+span.SpanContext().SpanID().String()+"-01", *tp)

		// A duplicate keeps the first call's traceparent; its own span
		// is in the trace all the same.
		res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card", Arguments: charge("idempotency_key", "traced-1")})
		require.NoError(t, err)
		require.False(t, res.IsError, text(res))
		require.Len(t, bundle.spans("execute_tool charge_card"), 2)
		require.Equal(t, *tp, *bundle.traceparentOf(t, "traced-1"))
	})

	// Without _meta (or with an invalid traceparent) the span continues
	// whatever the context holds: over the in-memory transport, nothing.
	// Every tool call has its span, the read tools' too.
	t.Run("NoTraceContext", func(t *testing.T) {
		t.Parallel()
		bundle := setupTrace(t)
		cs := bundle.connect(t)
		call[answer](t, cs, "charge_card", charge("idempotency_key", "untraced-1"))
		call[map[string]any](t, cs, "get_intent", map[string]any{"key": "untraced-1"})
		call[map[string]any](t, cs, "list_intents", map[string]any{})
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{
			Meta: mcp.Meta{"traceparent": "00-not-a-traceparent-01", "claudecode/toolUseId": 42},
			Name: "list_intents", Arguments: map[string]any{},
		})
		require.NoError(t, err)
		require.False(t, res.IsError, text(res))

		for name, n := range map[string]int{"charge_card": 1, "get_intent": 1, "list_intents": 2} {
			spans := bundle.spans("execute_tool " + name)
			require.Len(t, spans, n, name)
			for _, span := range spans {
				require.False(t, span.Parent().IsValid(), "%s: a root span", name)
				attrs := attributes(span)
				require.Equal(t, name, attrs["gen_ai.tool.name"])
				require.Equal(t, "execute_tool", attrs["gen_ai.operation.name"])
				require.NotContains(t, attrs, "gen_ai.tool.call.id", "no id sent, or not a string")
			}
		}

		// The intent records its root span.
		span := bundle.span(t, "execute_tool charge_card")
		require.Equal(t, "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01",
			*bundle.traceparentOf(t, "untraced-1"))
	})

	// Over HTTP, the span is a child of the HTTP request's span; a _meta
	// trace context takes precedence, and the HTTP span is linked.
	t.Run("HTTP", func(t *testing.T) {
		t.Parallel()
		bundle := setupTrace(t)
		cs := bundle.connectHTTP(t, "")
		call[answer](t, cs, "charge_card", charge("idempotency_key", "http-1"))
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{
			Meta: hostMeta(), Name: "get_intent", Arguments: map[string]any{"key": "http-1"},
		})
		require.NoError(t, err)
		require.False(t, res.IsError, text(res))

		// The HTTP spans as started: one may not have ended yet, since
		// the client can read an answer before the handler returns.
		httpSpans := map[trace.SpanID]bool{}
		for _, s := range bundle.recorder.Started() {
			if s.Name() == "POST /mcp" {
				httpSpans[s.SpanContext().SpanID()] = true
			}
		}
		enqueue := bundle.span(t, "execute_tool charge_card")
		require.False(t, enqueue.Parent().IsRemote())
		require.True(t, httpSpans[enqueue.Parent().SpanID()], "a child of an HTTP request's span")

		get := bundle.span(t, "execute_tool get_intent")
		require.Equal(t, hostSpanID, get.Parent().SpanID().String())
		require.Len(t, get.Links(), 1)
		require.True(t, httpSpans[get.Links()[0].SpanContext.SpanID()], "linked to its HTTP request's span")
	})

	// A refused call records its code as error.type and an error status,
	// whose description is the code alone.
	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		bundle := setupTrace(t)
		cs := bundle.connect(t)
		call[answer](t, cs, "charge_card", charge("idempotency_key", "reused-1"))
		callError(t, cs, "charge_card", charge("idempotency_key", "reused-1", "amount", 2000), "idempotency_key_reused")
		callError(t, cs, "charge_card", charge("amount", -1), "invalid_args")
		callError(t, cs, "get_intent", map[string]any{"key": "nothing-here"}, "not_found")

		want := map[string][]string{
			"execute_tool charge_card": {"", "idempotency_key_reused", "invalid_args"},
			"execute_tool get_intent":  {"not_found"},
		}
		for name, codesWanted := range want {
			spans := bundle.spans(name)
			require.Len(t, spans, len(codesWanted), name)
			for i, code := range codesWanted {
				attrs := attributes(spans[i])
				if code == "" {
					require.NotContains(t, attrs, "error.type")
					require.Equal(t, codes.Unset, spans[i].Status().Code)
					continue
				}
				require.Equal(t, code, attrs["error.type"], name)
				require.Equal(t, codes.Error, spans[i].Status().Code)
				require.Equal(t, code, spans[i].Status().Description)
			}
		}

		// A tool the server does not have is a protocol error: its
		// JSON-RPC code, and a span named without the client's made-up
		// name.
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
		require.ErrorIs(t, err, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams})
		span := bundle.span(t, "execute_tool")
		attrs := attributes(span)
		require.Equal(t, "-32602", attrs["error.type"])
		require.NotContains(t, attrs, "gen_ai.tool.name")
		require.Equal(t, codes.Error, span.Status().Code)
	})

	// No span, attribute, event, link or status records the arguments'
	// values, the idempotency key or the token.
	t.Run("NothingSecret", func(t *testing.T) {
		t.Parallel()
		bundle := setupTrace(t)
		const token = "tok-secret-Zq81vLr0Xw"
		secrets := []string{token, "key-secret-7Hc2", "cus_secret_9f3", "Secret personal note", "73919", "pm_secret_k7"}
		args := charge("idempotency_key", "key-secret-7Hc2", "customer", "cus_secret_9f3",
			"description", "Secret personal note", "amount", 73919, "payment_method", "pm_secret_k7")
		for _, cs := range []*mcp.ClientSession{bundle.connectHTTP(t, token), bundle.connect(t)} {
			for _, p := range []*mcp.CallToolParams{
				{Meta: hostMeta(), Name: "charge_card", Arguments: args},
				{Name: "charge_card", Arguments: args},
				{Name: "charge_card", Arguments: charge("idempotency_key", "key-secret-7Hc2", "customer", "cus_secret_9f3", "amount", 1)},
				{Name: "charge_card", Arguments: charge("idempotency_key", "key-secret-7Hc2 with a space", "customer", "cus_secret_9f3")},
				{Name: "get_intent", Arguments: map[string]any{"key": "key-secret-7Hc2"}},
				{Name: "get_intent", Arguments: map[string]any{"key": "key-secret-7Hc2", "wait_seconds": 73919}},
				{Name: "list_intents", Arguments: map[string]any{"cursor": "key-secret-7Hc2"}},
			} {
				_, err := cs.CallTool(t.Context(), p)
				require.NoError(t, err)
			}
		}

		spans := bundle.recorder.Ended()
		require.NotEmpty(t, bundle.spans("execute_tool charge_card"))
		var recorded []string
		for _, s := range spans {
			recorded = append(recorded, s.Name(), s.Status().Description)
			for _, kv := range s.Attributes() {
				recorded = append(recorded, string(kv.Key), kv.Value.String())
			}
			for _, e := range s.Events() {
				recorded = append(recorded, e.Name)
				for _, kv := range e.Attributes {
					recorded = append(recorded, string(kv.Key), kv.Value.String())
				}
			}
			for _, l := range s.Links() {
				for _, kv := range l.Attributes {
					recorded = append(recorded, string(kv.Key), kv.Value.String())
				}
			}
		}
		for _, r := range recorded {
			for _, secret := range secrets {
				require.NotContains(t, strings.ToLower(r), strings.ToLower(secret))
			}
		}
	})
}

package httpsend

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/effects"
)

// TestClientSpan sends requests inside a recording span: each is a client
// span, a child of it, named by the URL template, whose attributes hold the
// scheme and host but never the path or query sent (where arguments, keys
// and tokens go); the provider receives the trace context.
func TestClientSpan(t *testing.T) {
	t.Parallel()

	var gotTraceparent string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotTraceparent = r.Header.Get("Traceparent")
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	ctx, parent := provider.Tracer("test").Start(t.Context(), "attempt")

	const secret = "SECRET-provider-key"
	for _, client := range []*http.Client{NewClient(1), Wrap(&http.Client{})} {
		req, err := http.NewRequestWithContext(WithURLTemplate(ctx, "/v2/tickets/{args.id}"), http.MethodPost,
			srv.URL+"/v2/tickets/"+secret+"?external_id="+secret, nil)
		require.NoError(t, err)
		resp, err := Do(client, req, "provider")
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	// A request without a template shows scheme and host alone, and one
	// that fails shows no URL in its error either.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/hooks/"+secret, nil)
	require.NoError(t, err)
	_, err = Do(NewClient(1), req, "provider")
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	l.Close()
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, closed+"/hooks/"+secret, nil)
	require.NoError(t, err)
	_, err = Do(NewClient(1), req, "provider")
	class, code := effects.Classify(err)
	require.Equal(t, effects.ClassNotSent, class, "error: %v", err)
	require.Equal(t, "connection_failed", code)
	require.NotContains(t, err.Error(), secret)
	parent.End()

	spans := recorder.Ended()
	require.Len(t, spans, 5)
	var clients []sdktrace.ReadOnlySpan
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			require.NotContains(t, kv.Value.String(), secret, "span %q attribute %s", s.Name(), kv.Key)
		}
		require.NotContains(t, s.Status().Description, secret)
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				require.NotContains(t, kv.Value.String(), secret)
			}
		}
		if s.SpanKind() == trace.SpanKindClient {
			clients = append(clients, s)
		}
	}
	require.Len(t, clients, 4)
	for i, s := range clients {
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID())
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID())
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if i < 2 {
			require.Equal(t, "POST /v2/tickets/{args.id}", s.Name())
			require.Equal(t, "/v2/tickets/{args.id}", attrs["url.template"])
			require.Equal(t, srv.URL, attrs["url.full"])
			require.Equal(t, "201", attrs["http.response.status_code"])
		} else {
			require.Equal(t, "POST", s.Name())
			require.NotContains(t, attrs, "url.template")
			require.True(t, strings.HasPrefix(attrs["url.full"], "http://127.0.0.1:"), attrs["url.full"])
		}
	}
	require.Equal(t, clients[2].SpanContext().TraceID().String(), strings.Split(gotTraceparent, "-")[1])
}

// BenchmarkTransport measures what the client span costs a provider request
// with traces off (a no-op span) and on (an SDK span, recorded and
// dropped), against the same client without it, on a loopback server:
//
//	go test ./effects/internal/httpsend -run XXX -bench Transport -benchmem
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	// NewClient's client without the span.
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 4
	bare := &http.Client{Transport: &Transport{Base: base}}
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	for _, c := range []struct {
		name   string
		client *http.Client
		ctx    func() (context.Context, func())
	}{
		{"Bare", bare, func() (context.Context, func()) { return context.Background(), func() {} }},
		{"Off", NewClient(4), func() (context.Context, func()) { return context.Background(), func() {} }},
		{"On", NewClient(4), func() (context.Context, func()) {
			ctx, span := provider.Tracer("bench").Start(context.Background(), "attempt")
			return ctx, func() { span.End() }
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				ctx, end := c.ctx()
				req, _ := http.NewRequestWithContext(WithURLTemplate(ctx, "/v1/things"), http.MethodPost, srv.URL+"/v1/things", nil)
				if _, err := Do(c.client, req, "bench"); err != nil {
					b.Fatal(err)
				}
				end()
			}
		})
	}
}

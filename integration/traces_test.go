package integration

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outbox-dev/outbox/outbox"
)

// collector is an OTLP/HTTP trace receiver: what an OpenTelemetry
// collector does with POST /v1/traces (protobuf), keeping the spans and
// their resources.
type collector struct {
	*httptest.Server

	mu    sync.Mutex
	spans []*tracepb.Span
	// resources are the resource attributes of every batch received.
	resources []map[string]string
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			attrs := map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			c.resources = append(c.resources, attrs)
			for _, ss := range rs.GetScopeSpans() {
				c.spans = append(c.spans, ss.GetSpans()...)
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) received() ([]*tracepb.Span, []map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...), append([]map[string]string(nil), c.resources...)
}

// TestTracesExported runs serve as operators turn traces on, with the
// standard variables and an OTLP endpoint, and checks what reaches the
// collector: the API's span continuing the agent's trace, the attempt's
// span linked to it, the provider request under the attempt, SQL
// statements (OUTBOX_TRACE_SQL), and the version of outbox_build_info and
// the logs on every span's resource. A serve given only the endpoint, as
// autoexport alone would take for "on", sends nothing: traces are off
// unless OTEL_TRACES_EXPORTER asks.
func TestTracesExported(t *testing.T) {
	t.Parallel()

	c := newCollector(t)
	otlp := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}

	t.Run("OffUnlessAsked", func(t *testing.T) {
		e := newEnv(t, otlp...)
		p := e.serve()
		require.NotContains(t, p.output(), "exporting traces")
		postTracedIntent(t, p.addr, "untraced-1", `{"effect":"ticket","args":{"subject":"Refund","body":"Please."}}`, "")
		require.Equal(t, outbox.StateSucceeded, e.wait("untraced-1", 30*time.Second).State)
		p.signal(syscall.SIGTERM)
		<-p.done
		spans, _ := c.received()
		require.Empty(t, spans)
	})

	t.Run("OTLP", func(t *testing.T) {
		e := newEnv(t, append(otlp, "OTEL_TRACES_EXPORTER=otlp", "OUTBOX_TRACE_SQL=true")...)
		p := e.serve()
		p.waitFor("exporting traces", time.Second)
		serving := p.waitFor("outboxd serving", time.Second)
		_, v, _ := strings.Cut(serving, "version=")
		v, _, _ = strings.Cut(v, " ")

		const agentTrace, agentSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		postTracedIntent(t, p.addr, "traced-1", `{"effect":"ticket","args":{"subject":"Refund","body":"private-body-7781"}}`,
			"00-"+agentTrace+"-"+agentSpan+"-01")
		require.Equal(t, outbox.StateSucceeded, e.wait("traced-1", 30*time.Second).State)
		p.signal(syscall.SIGTERM) // the stop flushes what is left
		<-p.done

		spans, resources := c.received()
		require.NotEmpty(t, resources)
		for _, r := range resources {
			require.Equal(t, "outboxd", r["service.name"])
			require.Equal(t, v, r["service.version"])
		}
		hex := toHex
		var enqueue, attempt *tracepb.Span
		sql := 0
		for _, s := range spans {
			for _, kv := range s.GetAttributes() {
				for _, secret := range []string{"traced-1", "private-body-7781"} {
					require.NotContains(t, kv.GetValue().String(), secret, "span %q attribute %s", s.GetName(), kv.GetKey())
				}
			}
			switch {
			case s.GetName() == "POST /v1/intents":
				enqueue = s
			case s.GetName() == "attempt ticket":
				attempt = s
			case s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT && strings.Contains(strings.ToLower(s.GetName()), "select"),
				s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT && strings.Contains(strings.ToLower(s.GetName()), "insert"),
				s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT && strings.Contains(strings.ToLower(s.GetName()), "update"):
				sql++
			}
		}
		require.NotNil(t, enqueue, "the API's span was exported")
		require.Equal(t, agentTrace, hex(enqueue.GetTraceId()))
		require.Equal(t, agentSpan, hex(enqueue.GetParentSpanId()))
		require.NotNil(t, attempt, "the attempt's span was exported")
		require.Len(t, attempt.GetLinks(), 1)
		require.Equal(t, agentTrace, hex(attempt.GetLinks()[0].GetTraceId()))
		require.Equal(t, hex(enqueue.GetSpanId()), hex(attempt.GetLinks()[0].GetSpanId()))
		var request *tracepb.Span
		for _, s := range spans {
			if bytes.Equal(s.GetParentSpanId(), attempt.GetSpanId()) && s.GetName() == "POST /api/v2/tickets.json" {
				request = s
			}
		}
		require.NotNil(t, request, "the provider request is a client span under the attempt")
		require.Positive(t, sql, "OUTBOX_TRACE_SQL gives the statements spans")
	})
}

func toHex(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&0xf])
	}
	return string(out)
}

// postTracedIntent enqueues over HTTP, with the agent's traceparent when given.
func postTracedIntent(t *testing.T, addr, key, body, traceparent string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/intents", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

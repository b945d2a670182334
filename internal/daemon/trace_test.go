package daemon_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/daemon"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// headerRecorder is the innermost transport of the effects' HTTP clients:
// it sees each request as the provider receives it.
type headerRecorder struct {
	mu           sync.Mutex
	traceparents []string
}

func (h *headerRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.traceparents = append(h.traceparents, r.Header.Get("Traceparent"))
	h.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// TestTraces follows enqueues through serve's parts, with spans recorded in
// memory: a ticket enqueued over HTTP (a River job of its own), and
// deduplicated webhooks enqueued by a Go program in one transaction (first
// attempts in a batch). The API's server span continues the agent's trace
// and is named by its route; each intent stores the traceparent of the
// span that enqueued it (the API's, or the program's); the attempt's span
// is a child of River's job span and links to the enqueue's span (it does
// not descend from it); the provider request is a client span under the
// attempt, and the provider receives its trace context. No span carries a
// key, an argument or a token.
func TestTraces(t *testing.T) {
	t.Parallel()

	pool, schema := testdb.MigratedSchema(t)
	zendesk, err := sandbox.NewZendesk(&sandbox.ZendeskConfig{})
	require.NoError(t, err)
	t.Cleanup(zendesk.Close)
	receiver, err := sandbox.NewWebhookReceiver(nil)
	require.NoError(t, err)
	t.Cleanup(receiver.Close)

	provider := &headerRecorder{}
	client := &http.Client{Transport: provider, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ticketEffect, err := ticket.New(&ticket.Config{URL: zendesk.URL(), Email: "agent@example.com", Token: "zendesk-secret-token", HTTPClient: client})
	require.NoError(t, err)
	webhookEffect, err := webhook.New(&webhook.Config{
		Endpoints:  []webhook.Endpoint{{Name: "orders", URL: receiver.EndpointURL("orders", true), Dedupe: true}},
		HTTPClient: client,
		Secret:     receiver.Secret(),
	})
	require.NoError(t, err)
	registry, err := effects.NewRegistry(ticketEffect, webhookEffect)
	require.NoError(t, err)

	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	const token = "trace-test-token-0123456789"
	d, err := daemon.Start(t.Context(), pool, &daemon.Config{
		APITokens:      []access.Token{access.NewToken(token, "shop", access.RoleOperator)},
		Dispatcher:     dispatcher.Config{EffectTimeout: 5 * time.Second},
		Effects:        registry,
		HTTPAddr:       "127.0.0.1:0",
		Schema:         schema,
		TracerProvider: tp,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Stop(context.Background()) })

	// The agent's own span: the caller of the API.
	agentTrace := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	agentSpan := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	agentTraceparent := "00-" + agentTrace.String() + "-" + agentSpan.String() + "-01"

	secrets := []string{token, "zendesk-secret-token"}
	webhookKeys := []string{"webhook-key-a83b20", "webhook-key-5f0e11", "webhook-key-c29d47"}
	enqueue := func(key, effect, args string) {
		secrets = append(secrets, key)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+d.Addr()+"/v1/intents",
			bytes.NewBufferString(`{"effect":"`+effect+`","args":`+args+`}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Traceparent", agentTraceparent)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	enqueue("ticket-key-7c1d9e", "ticket", `{"subject":"Refund for order 5521","body":"personal-body-text","requester_email":"alice@example.com"}`)
	secrets = append(secrets, "Refund for order 5521", "personal-body-text", "alice@example.com")
	// Three webhooks enqueued by a Go program in one transaction, inside
	// its own span: the drain takes them together, into one batch.
	libCtx, libSpan := tp.Tracer("agent").Start(t.Context(), "agent enqueue")
	tx, err := pool.Begin(libCtx)
	require.NoError(t, err)
	var params []*outbox.EnqueueParams
	for _, key := range webhookKeys {
		secrets = append(secrets, key)
		params = append(params, &outbox.EnqueueParams{Namespace: "shop", Key: key, Effect: "webhook",
			Args: map[string]any{"endpoint": "orders", "payload": map[string]string{"order": "ord-private-" + key}}})
	}
	_, err = d.Client.EnqueueManyTx(libCtx, tx, params)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(libCtx))
	libSpan.End()
	secrets = append(secrets, "ord-private-")

	intentIDs := map[string]string{}
	for _, key := range append([]string{"ticket-key-7c1d9e"}, webhookKeys...) {
		intent, err := d.Client.Wait(waitCtx(t), "shop", key)
		require.NoError(t, err)
		require.Equal(t, outbox.StateSucceeded, intent.State, "intent %s", key)
		intentIDs[key] = strconv.FormatInt(intent.ID, 10)
		secrets = append(secrets, intent.ProviderKey)
	}
	// A read names the key in its path: its span shows the route.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+d.Addr()+"/v1/intents/ticket-key-7c1d9e", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A readiness probe is not traced.
	req, err = http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+d.Addr()+"/readyz", nil)
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, d.Stop(t.Context())) // every span ended
	spans := recorder.Ended()

	// No span carries a key (the agent's, or the provider key derived from
	// it), an argument or a token: not in its name, attributes, events or
	// status.
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, kv := range s.Attributes() {
			texts = append(texts, kv.Value.String())
		}
		for _, ev := range s.Events() {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.String())
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				require.NotContains(t, text, secret, "span %q", s.Name())
			}
		}
	}

	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	attr := func(s sdktrace.ReadOnlySpan, key string) string {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == key {
				return kv.Value.String()
			}
		}
		return ""
	}

	// The API's spans: children of the agent's span, named by the route.
	var enqueues []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "POST /v1/intents" {
			enqueues = append(enqueues, s)
		}
	}
	require.Len(t, enqueues, 1)
	var read sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "GET /v1/intents/{key}" {
			read = s
		}
	}
	require.NotNil(t, read, "the read's span is named by its route")
	for _, s := range spans {
		require.NotContains(t, s.Name(), "readyz")
	}
	require.Equal(t, "/v1/intents/{key}", attr(read, "url.path"))
	for _, s := range enqueues {
		require.Equal(t, agentTrace, s.SpanContext().TraceID())
		require.Equal(t, agentSpan, s.Parent().SpanID())
		require.True(t, s.Parent().IsRemote())
		require.Equal(t, trace.SpanKindServer, s.SpanKind())
		require.Equal(t, "/v1/intents", attr(s, "http.route"))
		require.Equal(t, "/v1/intents", attr(s, "url.path"))
	}

	for _, c := range []struct {
		key, effect, job string
		enqueuedBy       trace.SpanContext
	}{
		{"ticket-key-7c1d9e", "ticket", "river.work/outbox_intent", enqueues[0].SpanContext()},
		{webhookKeys[1], "webhook", "river.work/outbox_intent_batch", libSpan.SpanContext()},
	} {
		t.Run(c.effect, func(t *testing.T) {
			// The intent stores the traceparent of the API's span that
			// enqueued it.
			var stored string
			require.NoError(t, pool.QueryRow(t.Context(),
				`SELECT traceparent FROM `+schema+`.outbox_intent WHERE namespace = 'shop' AND key = $1`, c.key).Scan(&stored))
			enqueued := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(t.Context(), propagation.MapCarrier{"traceparent": stored}))
			require.True(t, enqueued.IsValid(), "traceparent %q", stored)
			require.Equal(t, c.enqueuedBy.TraceID(), enqueued.TraceID())
			require.Equal(t, c.enqueuedBy.SpanID(), enqueued.SpanID())

			var attempt sdktrace.ReadOnlySpan
			for _, s := range spans {
				if s.Name() == "attempt "+c.effect && attr(s, "outbox.intent.id") == intentIDs[c.key] {
					require.Nil(t, attempt, "one attempt")
					attempt = s
				}
			}
			require.NotNil(t, attempt)
			// Linked to the enqueue, not its child: a trace of its own.
			require.Len(t, attempt.Links(), 1)
			require.Equal(t, enqueued.TraceID(), attempt.Links()[0].SpanContext.TraceID())
			require.Equal(t, enqueued.SpanID(), attempt.Links()[0].SpanContext.SpanID())
			require.NotEqual(t, agentTrace, attempt.SpanContext().TraceID())
			// Under River's job span.
			job, ok := byID[attempt.Parent().SpanID()]
			require.True(t, ok, "the attempt's parent is a recorded span")
			require.Equal(t, c.job, job.Name())
			require.Equal(t, c.effect, attr(attempt, "outbox.effect"))
			require.Equal(t, "shop", attr(attempt, "outbox.namespace"))
			require.Equal(t, "1", attr(attempt, "outbox.attempt"))
			require.NotEmpty(t, attr(attempt, "outbox.guarantee"))
			require.Equal(t, "succeeded", attr(attempt, "outbox.outcome"))
			require.Equal(t, "succeeded", attr(attempt, "outbox.state"))

			// The provider request: a client span under the attempt,
			// whose trace context the provider received.
			var requests []sdktrace.ReadOnlySpan
			for _, s := range spans {
				if s.Parent().SpanID() == attempt.SpanContext().SpanID() && s.SpanKind() == trace.SpanKindClient {
					requests = append(requests, s)
				}
			}
			require.NotEmpty(t, requests)
			for _, r := range requests {
				require.True(t, strings.HasPrefix(attr(r, "url.full"), "http://127.0.0.1:"), attr(r, "url.full"))
				require.Contains(t, provider.traceparents, "00-"+r.SpanContext().TraceID().String()+"-"+r.SpanContext().SpanID().String()+"-01")
			}
		})
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

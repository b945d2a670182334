package sandbox

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func postPaymentIntent(t *testing.T, s *Stripe, key, form string) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+"/v1/payment_intents", strings.NewReader(form))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer sk_test_x")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp, body
}

func TestStripe(t *testing.T) {
	t.Parallel()
	s, err := NewStripe(nil)
	require.NoError(t, err)
	defer s.Close()
	const form = "amount=100&currency=usd&confirm=true&customer=cus_1"

	resp, first := postPaymentIntent(t, s, "k1", form)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "succeeded", first["status"])

	// Same key, same parameters in another order: replayed.
	resp, again := postPaymentIntent(t, s, "k1", "customer=cus_1&confirm=true&currency=usd&amount=100")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first["id"], again["id"])

	resp, body := postPaymentIntent(t, s, "k1", "amount=200&currency=usd&confirm=true&customer=cus_1")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "idempotency_error", body["error"].(map[string]any)["type"])

	// Without a key, every request is a new charge.
	postPaymentIntent(t, s, "", form)
	postPaymentIntent(t, s, "", form)
	require.Equal(t, 3, s.Effects())

	// A 429 keeps nothing: the next request with the key runs.
	s.Misbehave(Fault{Kind: FaultTooManyRequests})
	resp, _ = postPaymentIntent(t, s, "k2", form)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	resp, _ = postPaymentIntent(t, s, "k2", form)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"))

	// A decline is kept and replayed.
	resp, body = postPaymentIntent(t, s, "k3", form+"&payment_method="+PaymentMethodDeclined)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	require.Equal(t, "generic_decline", body["error"].(map[string]any)["decline_code"])
	resp, _ = postPaymentIntent(t, s, "k3", form+"&payment_method="+PaymentMethodDeclined)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))

	// After 24 hours a key is forgotten, as at Stripe: the same request
	// charges again.
	s.mu.Lock()
	s.now = func() time.Time { return time.Now().Add(StripeIdempotencyWindow + time.Minute) }
	s.mu.Unlock()
	before := s.Effects()
	resp, later := postPaymentIntent(t, s, "k1", form)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotEqual(t, first["id"], later["id"])
	require.Equal(t, before+1, s.Effects())
}

func TestControlEndpoint(t *testing.T) {
	t.Parallel()
	sb, err := Start(nil)
	require.NoError(t, err)
	defer sb.Close()

	resp, err := http.Post(sb.Zendesk.URL()+"/_sandbox/faults", "application/json", strings.NewReader(`{"kind": "slow", "delay": "1ms", "count": 2}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, sb.Zendesk.faults, 2)
	require.Equal(t, time.Millisecond, sb.Zendesk.faults[0].Delay)

	resp, err = http.Post(sb.Stripe.URL()+"/_sandbox/faults", "application/json", strings.NewReader(`{"kind": "explode"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	postPaymentIntent(t, sb.Stripe, "k", "amount=1&currency=usd&confirm=true")
	resp, err = http.Get(sb.Stripe.URL() + "/_sandbox/stats")
	require.NoError(t, err)
	var stats Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&stats))
	resp.Body.Close()
	require.Equal(t, Stats{Effects: 1, Requests: 1}, stats)
}

func TestZendeskAuth(t *testing.T) {
	t.Parallel()
	z, err := NewZendesk(&ZendeskConfig{Email: "a@example.com", Token: "tok"})
	require.NoError(t, err)
	defer z.Close()
	req, err := http.NewRequest(http.MethodGet, z.URL()+"/api/v2/tickets.json?"+url.Values{"external_id": {"x"}}.Encode(), nil)
	require.NoError(t, err)
	req.SetBasicAuth("a@example.com/token", "nope")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestSMTPSinkHangEndsOnClose(t *testing.T) {
	t.Parallel()
	s, err := NewSMTPSink(nil)
	require.NoError(t, err)
	s.Misbehave(Fault{Kind: FaultHangAfter})
	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	tp := textproto.NewConn(conn)
	for _, step := range []struct {
		cmd  string
		code int
	}{{"", 220}, {"EHLO t", 250}, {"MAIL FROM:<a@example.com>", 250}, {"RCPT TO:<b@example.com>", 250}, {"DATA", 354}} {
		if step.cmd != "" {
			require.NoError(t, tp.PrintfLine("%s", step.cmd))
		}
		_, _, err := tp.ReadResponse(step.code)
		require.NoError(t, err, step.cmd)
	}
	require.NoError(t, tp.PrintfLine("Message-ID: <obx_k@example.com>\r\nSubject: hi\r\n\r\nbody\r\n."))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.WaitHanging(ctx, "obx_k"))
	require.Equal(t, 1, s.EffectsFor("obx_k"))
	require.Equal(t, "hi", s.Messages()[0].Subject)
	s.Close() // ends the hang, and every goroutine (goleak checks)
}

package declared

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/sandbox"
)

// refundStandIn behaves like Stripe's refunds endpoint as its
// documentation says (docs.stripe.com/api/idempotent_requests): the first
// answer to an Idempotency-Key is stored and replayed, status and body; a
// key reused with other parameters is refused with 400 idempotency_error;
// a key whose first request is still in flight gets 409
// idempotency_key_in_use. It counts refunds made, and misbehaves on
// request: one fault per request, in order.
type refundStandIn struct {
	*httptest.Server

	mu       sync.Mutex
	refunds  int
	requests int
	answers  map[string]storedAnswer
	inFlight map[string]bool
	faults   []string
	lastAuth string
}

type storedAnswer struct {
	params string
	status int
	body   string
}

func newRefundStandIn(t *testing.T) *refundStandIn {
	s := &refundStandIn{answers: map[string]storedAnswer{}, inFlight: map[string]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *refundStandIn) misbehave(faults ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

func (s *refundStandIn) counts() (refunds, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refunds, s.requests
}

func (s *refundStandIn) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/refunds" {
		http.NotFound(w, r)
		return
	}
	_ = r.ParseForm()
	params := r.PostForm.Encode()
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.requests++
	s.lastAuth = r.Header.Get("Authorization")
	fault := ""
	if len(s.faults) > 0 {
		fault, s.faults = s.faults[0], s.faults[1:]
	}
	if stored, ok := s.answers[key]; ok && key != "" {
		s.mu.Unlock()
		if stored.params != params {
			writeStripeError(w, http.StatusBadRequest, "idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with.")
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(stored.status)
		_, _ = w.Write([]byte(stored.body))
		return
	}
	if s.inFlight[key] && key != "" {
		s.mu.Unlock()
		writeStripeError(w, http.StatusConflict, "idempotency_error", "idempotency_key_in_use", "There is currently another in-progress request using this Idempotent Key.")
		return
	}
	s.inFlight[key] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.inFlight, key)
		s.mu.Unlock()
	}()

	switch fault {
	case "unavailable": // not processed, and so not stored
		w.Header().Set("Retry-After", "2")
		writeStripeError(w, http.StatusServiceUnavailable, "api_error", "", "try later")
		return
	case "echo_auth": // a provider that quotes the request in its error
		writeStripeError(w, http.StatusBadRequest, "invalid_request_error", "", "bad request with "+r.Header.Get("Authorization"))
		return
	case "decline":
		s.store(key, params, http.StatusPaymentRequired, `{"error":{"type":"card_error","code":"card_declined"}}`)
		writeStripeError(w, http.StatusPaymentRequired, "card_error", "card_declined", "Your card was declined.")
		return
	}
	s.mu.Lock()
	s.refunds++
	body := fmt.Sprintf(`{"id":"re_%d","object":"refund","status":"succeeded","amount":%s}`, s.refunds, orDefault(r.PostForm.Get("amount"), "1999"))
	s.answers[key] = storedAnswer{params: params, status: http.StatusOK, body: body}
	s.mu.Unlock()
	switch fault {
	case "reset":
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		_ = conn.Close()
		return
	case "slow":
		time.Sleep(700 * time.Millisecond)
	case "no_id":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"refund"}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(body))
}

func (s *refundStandIn) store(key, params string, status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key != "" {
		s.answers[key] = storedAnswer{params: params, status: status, body: body}
	}
}

func writeStripeError(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"type": typ, "code": code, "message": msg}})
	_, _ = w.Write(b)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// refundEffect declares the stripe.refund preset against a stand-in.
func refundEffect(t *testing.T, url string, timeout time.Duration) *Effect {
	t.Helper()
	src := fmt.Sprintf(`effects:
  refund:
    preset: stripe.refund
    request:
      url: "%s/v1/refunds"
      timeout: %s
`, url, timeout)
	effs, err := Parse("effects.yaml", []byte(src), &Config{
		LookupEnv: func(name string) (string, bool) {
			return map[string]string{"STRIPE_KEY": "sk_test_secret_42"}[name], true
		},
		LoopbackOnly: true,
	})
	require.NoError(t, err)
	return effs[0]
}

func classOf(t *testing.T, err error) (effects.Class, string) {
	t.Helper()
	require.Error(t, err)
	return effects.Classify(err)
}

func TestRefundAgainstIdempotentStandIn(t *testing.T) {
	t.Parallel()

	req := func(key string, args string) *effects.Request {
		return &effects.Request{Args: json.RawMessage(args), Attempt: 1, IntentID: 1, ProviderKey: key}
	}
	const args = `{"payment_intent": "pi_123", "amount": 500}`
	ctx := context.Background()

	t.Run("RetryIsReplayed", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		e := refundEffect(t, s.URL, time.Second)
		first, err := e.Execute(ctx, req("pk_1", args))
		require.NoError(t, err)
		require.JSONEq(t, `{"id": "re_1", "status": "succeeded", "amount": 500}`, string(first))
		again, err := e.Execute(ctx, req("pk_1", args))
		require.NoError(t, err)
		require.JSONEq(t, string(first), string(again))
		refunds, requests := s.counts()
		require.Equal(t, 1, refunds)
		require.Equal(t, 2, requests)
		require.Equal(t, "Bearer sk_test_secret_42", s.lastAuth)
	})
	t.Run("AbsentOptionalArgumentIsDropped", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		e := refundEffect(t, s.URL, time.Second)
		res, err := e.Execute(ctx, req("pk_2", `{"payment_intent": "pi_123"}`))
		require.NoError(t, err)
		require.JSONEq(t, `{"id": "re_1", "status": "succeeded", "amount": 1999}`, string(res), "no amount sent: the stand-in's default")
	})
	t.Run("DeclineIsPermanentAndReplayed", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		s.misbehave("decline")
		e := refundEffect(t, s.URL, time.Second)
		for range 2 {
			_, err := e.Execute(ctx, req("pk_3", args))
			class, code := classOf(t, err)
			require.Equal(t, effects.ClassPermanent, class)
			require.Equal(t, "card_declined", code)
		}
		refunds, _ := s.counts()
		require.Zero(t, refunds)
	})
	t.Run("UnavailableIsNotSentWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		s.misbehave("unavailable")
		e := refundEffect(t, s.URL, time.Second)
		_, err := e.Execute(ctx, req("pk_4", args))
		class, _ := classOf(t, err)
		require.Equal(t, effects.ClassNotSent, class)
		require.Equal(t, 2*time.Second, effects.RetryAfterOf(err))
		_, err = e.Execute(ctx, req("pk_4", args))
		require.NoError(t, err)
		refunds, _ := s.counts()
		require.Equal(t, 1, refunds)
	})
	t.Run("ResetAfterActingIsAmbiguousThenReplayed", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		s.misbehave("reset")
		e := refundEffect(t, s.URL, time.Second)
		_, err := e.Execute(ctx, req("pk_5", args))
		class, _ := classOf(t, err)
		require.Equal(t, effects.ClassAmbiguous, class)
		res, err := e.Execute(ctx, req("pk_5", args))
		require.NoError(t, err)
		require.Contains(t, string(res), `"re_1"`)
		refunds, _ := s.counts()
		require.Equal(t, 1, refunds)
	})
	t.Run("SlowAnswerIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		s.misbehave("slow")
		e := refundEffect(t, s.URL, 200*time.Millisecond)
		_, err := e.Execute(ctx, req("pk_6", args))
		class, code := classOf(t, err)
		require.Equal(t, effects.ClassAmbiguous, class)
		require.Equal(t, "timeout", code)
	})
	t.Run("UnreadableAnswerIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		s.misbehave("no_id")
		e := refundEffect(t, s.URL, time.Second)
		_, err := e.Execute(ctx, req("pk_7", args))
		class, code := classOf(t, err)
		require.Equal(t, effects.ClassAmbiguous, class)
		require.Equal(t, "unreadable_answer", code)
	})
	t.Run("SecretNeverInAnError", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		s.misbehave("echo_auth")
		e := refundEffect(t, s.URL, time.Second)
		_, err := e.Execute(ctx, req("pk_8", args))
		class, code := classOf(t, err)
		require.Equal(t, effects.ClassPermanent, class)
		require.Equal(t, "http_400", code)
		require.NotContains(t, err.Error(), "sk_test_secret_42")
		require.Contains(t, err.Error(), "[redacted]")
	})
	t.Run("BadArgsAreRefusedNamingTheField", func(t *testing.T) {
		t.Parallel()
		e := refundEffect(t, "http://127.0.0.1:9", time.Second)
		for args, field := range map[string]string{
			`{"amount": 5}`:                             "payment_intent",
			`{"payment_intent": "ch_1"}`:                "payment_intent",
			`{"payment_intent": "pi_1", "amount": 0}`:   "amount",
			`{"payment_intent": "pi_1", "extra": 1}`:    "",
			`{"payment_intent": "pi_1", "amount": 1.5}`: "amount",
		} {
			err := e.ValidateArgs(json.RawMessage(args))
			var ae *effects.ArgError
			require.True(t, errors.As(err, &ae), "%s: %v", args, err)
			if field != "" {
				require.Equal(t, field, ae.Field, "%s: %v", args, err)
			}
		}
		require.NoError(t, e.ValidateArgs(json.RawMessage(`{"payment_intent": "pi_1", "amount": 1.0e2}`)))
	})
}

// TestDeclaredTicketAgainstZendesk declares the built-in ticket effect in
// a file, and runs it against the sandbox's Zendesk stand-in: a create, a
// look-up that finds it by provider key, one that finds nothing, and the
// faults the built-in's tests use.
func TestDeclaredTicketAgainstZendesk(t *testing.T) {
	t.Parallel()

	z, err := sandbox.NewZendesk(&sandbox.ZendeskConfig{})
	require.NoError(t, err)
	t.Cleanup(z.Close)
	src := `effects:
  ticket_from_file:
    description: Open a support ticket.
    guarantee: reconcilable
    args:
      type: object
      required: [subject, body]
      properties:
        subject: {type: string, minLength: 1}
        body: {type: string, minLength: 1}
        priority: {type: string, enum: [low, normal, high, urgent]}
    request:
      url: "{env.ZENDESK_URL}/api/v2/tickets.json"
      headers: {Authorization: "Basic {env.ZENDESK_AUTH}"}
      body:
        ticket: {subject: "{args.subject}", comment: {body: "{args.body}"}, priority: "{args.priority}", external_id: "{provider_key}"}
    result: {id: /ticket/id}
    lookup:
      url: "{env.ZENDESK_URL}/api/v2/tickets.json?external_id={provider_key}"
      headers: {Authorization: "Basic {env.ZENDESK_AUTH}"}
      items: body.tickets
      match: item.external_id == provider_key
      result: {id: /id}
`
	effs, err := Parse("effects.yaml", []byte(src), &Config{LoopbackOnly: true, LookupEnv: func(name string) (string, bool) {
		return map[string]string{"ZENDESK_URL": z.URL(), "ZENDESK_AUTH": "YWdlbnRAZXhhbXBsZS5jb20vdG9rZW46dA=="}[name], true
	}})
	require.NoError(t, err)
	e := effs[0]
	ctx := context.Background()
	args := json.RawMessage(`{"subject": "Refund", "body": "Please refund order 12."}`)

	res, err := e.Execute(ctx, &effects.Request{Args: args, ProviderKey: "pk_ticket_1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"id": 1}`, string(res))
	require.Equal(t, 1, z.EffectsFor("pk_ticket_1"))

	found, ok, err := e.LookupRequest(ctx, &effects.Request{Args: args, ProviderKey: "pk_ticket_1"}, time.Now())
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `{"id": 1}`, string(found))
	_, ok, err = e.Lookup(ctx, "pk_ticket_missing")
	require.NoError(t, err)
	require.False(t, ok)

	// A 500 after creating: ambiguous (then the look-up finds it); a 503
	// before: not sent; a 422 refusal: permanent.
	z.MisbehaveFor("pk_ticket_2", sandbox.Fault{Kind: sandbox.FaultServerError}, sandbox.Fault{Kind: sandbox.FaultUnavailable}, sandbox.Fault{Kind: sandbox.FaultReject})
	req2 := &effects.Request{Args: args, ProviderKey: "pk_ticket_2"}
	_, err = e.Execute(ctx, req2)
	class, _ := classOf(t, err)
	require.Equal(t, effects.ClassAmbiguous, class)
	_, ok, err = e.Lookup(ctx, "pk_ticket_2")
	require.NoError(t, err)
	require.True(t, ok, "the ticket the 500 hid is found")
	_, err = e.Execute(ctx, req2)
	class, _ = classOf(t, err)
	require.Equal(t, effects.ClassNotSent, class)
	_, err = e.Execute(ctx, req2)
	class, code := classOf(t, err)
	require.Equal(t, effects.ClassPermanent, class)
	require.Equal(t, "http_422", code)
	require.Equal(t, 1, z.EffectsFor("pk_ticket_2"))

	// A look-up answered with anything but a list is a failure, never "not
	// found".
	broken := strings.Replace(src, "items: body.tickets", "items: body.count", 1)
	effs, err = Parse("effects.yaml", []byte(broken), &Config{LookupEnv: func(name string) (string, bool) {
		return map[string]string{"ZENDESK_URL": z.URL(), "ZENDESK_AUTH": "x"}[name], true
	}})
	require.NoError(t, err)
	_, ok, err = effs[0].Lookup(ctx, "pk_ticket_missing")
	require.Error(t, err)
	require.False(t, ok)
}

// TestRuleErrorsDoNotMatchAndAreCounted: a rule that reads a member an
// answer lacks fails to evaluate; it does not match, and the effect says so
// to OnRuleError, so that a rule a provider's new answer broke shows.
func TestRuleErrorsDoNotMatchAndAreCounted(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"id": "obj_1"}`))
	}))
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	counted := map[string]int{}
	src := fmt.Sprintf(`effects:
  ping:
    description: Ping.
    guarantee: at_most_once
    args: {type: object}
    request: {url: "%s/ping"}
    outcome:
      - when: body.error.code == "busy"
        class: not_sent
    result: {id: /id}
`, srv.URL)
	effs, err := Parse("effects.yaml", []byte(src), &Config{OnRuleError: func(effect string) {
		mu.Lock()
		defer mu.Unlock()
		counted[effect]++
	}})
	require.NoError(t, err)
	res, err := effs[0].Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{}`), ProviderKey: "pk"})
	require.NoError(t, err, "the rule did not match: the default class, success")
	require.JSONEq(t, `{"id": "obj_1"}`, string(res))
	require.Equal(t, map[string]int{"ping": 1}, counted)
}

// Only {env.*} values of SecretMinLength or more are scrubbed: a one-letter
// value would otherwise take every such letter out of the provider's answer.
func TestScrubsOnlyValuesLongEnoughToBeSecrets(t *testing.T) {
	t.Parallel()

	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "<body> region %s refused token %s", r.Header.Get("X-Region"), r.Header.Get("Authorization"))
	}))
	t.Cleanup(provider.Close)
	src := `effects:
  ping:
    description: Ping once.
    guarantee: at_most_once
    args: {type: object}
    request:
      url: "{env.PING_URL}/ping"
      headers: {X-Region: "{env.PING_REGION}", Authorization: "{env.PING_TOKEN}"}
`
	vars := map[string]string{"PING_URL": provider.URL, "PING_REGION": "y", "PING_TOKEN": "tok_12345678"}
	effs, err := Parse("effects.yaml", []byte(src), &Config{
		LookupEnv: func(name string) (string, bool) { v, ok := vars[name]; return v, ok },
	})
	require.NoError(t, err)
	_, err = effs[0].Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{}`), Attempt: 1, IntentID: 1, ProviderKey: "pk_1"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "<body> region y refused token [redacted]")
	require.NotContains(t, err.Error(), "tok_12345678")
}

package declared

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
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
// key reused with other parameters is refused with 400 idempotency_error.
// A declined card's 402 is an answer too, stored and replayed. It counts
// refunds made. It handles one request at a time, so it never meets a key
// whose first request is still in flight (Stripe's 409).
type refundStandIn struct {
	standIn

	// The rest is under standIn.mu.
	refunds int
	answers map[string]storedAnswer
	// decline declines the refunds to come.
	decline bool
}

type storedAnswer struct {
	params string
	status int
	body   string
}

func newRefundStandIn(t *testing.T) *refundStandIn {
	s := &refundStandIn{answers: map[string]storedAnswer{}}
	s.start(t, s.serve)
	return s
}

// declineCards makes the card of every refund to come be declined.
func (s *refundStandIn) declineCards() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decline = true
}

func (s *refundStandIn) counts() (refunds, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refunds, s.requests
}

// lastAuth is the last request's Authorization header.
func (s *refundStandIn) lastAuth() string {
	header, _, _ := s.last()
	return header.Get("Authorization")
}

func (s *refundStandIn) serve(r *http.Request, body []byte) answer {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/refunds" {
		return answer{status: http.StatusNotFound, body: []byte("404 page not found\n")}
	}
	form, _ := url.ParseQuery(string(body))
	params := form.Encode()
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	defer s.mu.Unlock()
	if stored, ok := s.answers[key]; ok && key != "" {
		if stored.params != params {
			return stripeError(http.StatusBadRequest, "idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with.")
		}
		return answer{status: stored.status, header: map[string]string{"Idempotent-Replayed": "true"}, body: []byte(stored.body)}
	}
	if s.decline {
		declined := stripeError(http.StatusPaymentRequired, "card_error", "card_declined", "Your card was declined.")
		s.store(key, params, declined)
		return declined
	}
	s.refunds++
	refund := answer{status: http.StatusOK, body: []byte(fmt.Sprintf(`{"id":"re_%d","object":"refund","status":"succeeded","amount":%s}`,
		s.refunds, orDefault(form.Get("amount"), "1999")))}
	s.store(key, params, refund)
	return refund
}

// store keeps a key's first answer, for its replays. s.mu is held.
func (s *refundStandIn) store(key, params string, a answer) {
	if key != "" {
		s.answers[key] = storedAnswer{params: params, status: a.status, body: string(a.body.([]byte))}
	}
}

func stripeError(status int, typ, code, msg string) answer {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"type": typ, "code": code, "message": msg}})
	return answer{status: status, body: b}
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
		LookupEnvFunc: func(name string) (string, bool) {
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
		require.Equal(t, "Bearer sk_test_secret_42", s.lastAuth())
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
		s.declineCards()
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
		// Not processed, and so not stored.
		s.misbehave(fault{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "2"},
			body: `{"error": {"type": "api_error", "message": "try later"}}`})
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
		s.misbehave(fault{act: true, reset: true})
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
		s.misbehave(fault{act: true, delay: 700 * time.Millisecond})
		e := refundEffect(t, s.URL, 200*time.Millisecond)
		_, err := e.Execute(ctx, req("pk_6", args))
		class, code := classOf(t, err)
		require.Equal(t, effects.ClassAmbiguous, class)
		require.Equal(t, "timeout", code)
	})
	t.Run("UnreadableAnswerIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		s.misbehave(fault{act: true, status: http.StatusOK, body: `{"object":"refund"}`})
		e := refundEffect(t, s.URL, time.Second)
		_, err := e.Execute(ctx, req("pk_7", args))
		class, code := classOf(t, err)
		require.Equal(t, effects.ClassAmbiguous, class)
		require.Equal(t, "unreadable_answer", code)
	})
	t.Run("SecretNeverInAnError", func(t *testing.T) {
		t.Parallel()
		s := newRefundStandIn(t)
		// A provider that quotes the request in its error.
		s.misbehave(fault{status: http.StatusBadRequest, echo: true, body: `{"error": {"type": "invalid_request_error", "message": "bad request with ECHO"}}`})
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
	effs, err := Parse("effects.yaml", []byte(src), &Config{LoopbackOnly: true, LookupEnvFunc: func(name string) (string, bool) {
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
	effs, err = Parse("effects.yaml", []byte(broken), &Config{LookupEnvFunc: func(name string) (string, bool) {
		return map[string]string{"ZENDESK_URL": z.URL(), "ZENDESK_AUTH": "YWdlbnRAZXhhbXBsZS5jb20vdG9rZW46dA=="}[name], true
	}})
	require.NoError(t, err)
	_, ok, err = effs[0].Lookup(ctx, "pk_ticket_missing")
	require.ErrorContains(t, err, `answered 200: items: "body.count" gave double, not a list`)
	require.False(t, ok)
}

// TestRuleErrorsDoNotMatchAndAreCounted: a rule that reads a member an
// answer lacks fails to evaluate; it does not match, and the effect says so
// to OnRuleErrorFunc, so that a rule a provider's new answer broke shows.
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
	effs, err := Parse("effects.yaml", []byte(src), &Config{OnRuleErrorFunc: func(effect string) {
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
		LookupEnvFunc: func(name string) (string, bool) { v, ok := vars[name]; return v, ok },
	})
	require.NoError(t, err)
	_, err = effs[0].Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{}`), Attempt: 1, IntentID: 1, ProviderKey: "pk_1"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "<body> region y refused token [redacted]")
	require.NotContains(t, err.Error(), "tok_12345678")
}

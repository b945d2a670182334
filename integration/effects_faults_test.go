package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// faultCase is one intent meeting one provider fault.
type faultCase struct {
	name    string
	effect  string
	fault   sandbox.Fault
	state   outbox.State
	effects int
}

// slow answers after the attempt's deadline (OUTBOX_EFFECT_TIMEOUT=1s).
var slow = sandbox.Fault{Kind: sandbox.FaultSlow, Delay: 5 * time.Second}

// runFaultCases enqueues every case at once into one outboxd serve and
// checks each one's end: the cases run concurrently in the process, so the
// whole table takes about as long as its slowest case.
func runFaultCases(t *testing.T, p *providerEnv, cases []faultCase) {
	t.Helper()
	keys := make([]string, len(cases))
	p.serve()
	for i, tc := range cases {
		keys[i] = tc.effect + "-" + tc.name
		p.enqueueWithFaults(t, keys[i], tc.effect, effectArgs[tc.effect], tc.fault)
	}
	// Every effect each stand-in performed, whatever its key: a resend
	// under another key would show here, not in a count per key.
	t.Cleanup(func() {
		want := map[string]int{}
		for _, tc := range cases {
			want[tc.effect] += tc.effects
		}
		for effect, n := range want {
			require.Equal(t, n, p.standIn(effect).Effects(), "%s: effects performed, all keys", effect)
		}
	})
	for i, tc := range cases {
		t.Run(tc.effect+"/"+tc.name, func(t *testing.T) {
			intent := p.waitIntent(t, keys[i], 60*time.Second)
			require.Equal(t, tc.state, intent.State, "intent: %+v", intent)
			require.Equal(t, tc.effects, p.standIn(tc.effect).EffectsFor(intent.ProviderKey), "effects performed at the provider")
			if tc.fault.Kind == sandbox.FaultTooManyRequests || tc.fault.Kind == sandbox.FaultUnavailable {
				require.GreaterOrEqual(t, p.standIn(tc.effect).RequestsFor(intent.ProviderKey), 2, "retried after the refusal")
			}
		})
	}
}

// The seed failure and the provider faults (README, "Reliability") for each provider effect, against the sandbox, with
// a real outboxd serve: 429 and 503 before processing are retried; 5xx,
// resets and slow answers after processing end per guarantee: deduplicated
// (charge, webhook to a deduplicating endpoint) retries with the same key
// and performs once, reconcilable (ticket) looks the ticket up, at most once
// (email) ends unknown. Stripe replays a stored 500 to every retry, so that
// charge runs out of attempts (OUTBOX_MAX_ATTEMPTS=2 here) and ends unknown.
func TestEffectsProviderFaults(t *testing.T) {
	t.Parallel()
	p := newProviderEnv(t, true, "OUTBOX_MAX_ATTEMPTS=2")
	var cases []faultCase
	for _, effect := range []string{"charge", "email", "ticket", "webhook"} {
		cases = append(cases,
			faultCase{"TooManyRequestsBefore", effect, sandbox.Fault{Kind: sandbox.FaultTooManyRequests}, outbox.StateSucceeded, 1},
			faultCase{"UnavailableBefore", effect, sandbox.Fault{Kind: sandbox.FaultUnavailable}, outbox.StateSucceeded, 1},
		)
	}
	cases = append(cases,
		faultCase{"ServerErrorAfter", "charge", sandbox.Fault{Kind: sandbox.FaultServerError}, outbox.StateUnknown, 1},
		faultCase{"ResetAfter", "charge", sandbox.Fault{Kind: sandbox.FaultReset}, outbox.StateSucceeded, 1},
		faultCase{"SlowAfter", "charge", slow, outbox.StateSucceeded, 1},

		faultCase{"ResetAfter", "email", sandbox.Fault{Kind: sandbox.FaultReset}, outbox.StateUnknown, 1},
		faultCase{"SlowAfter", "email", slow, outbox.StateUnknown, 1},

		faultCase{"ServerErrorAfter", "ticket", sandbox.Fault{Kind: sandbox.FaultServerError}, outbox.StateSucceeded, 1},
		faultCase{"ResetAfter", "ticket", sandbox.Fault{Kind: sandbox.FaultReset}, outbox.StateSucceeded, 1},
		faultCase{"SlowAfter", "ticket", slow, outbox.StateSucceeded, 1},

		faultCase{"ServerErrorAfter", "webhook", sandbox.Fault{Kind: sandbox.FaultServerError}, outbox.StateSucceeded, 1},
		faultCase{"ResetAfter", "webhook", sandbox.Fault{Kind: sandbox.FaultReset}, outbox.StateSucceeded, 1},
		faultCase{"SlowAfter", "webhook", slow, outbox.StateSucceeded, 1},
	)
	runFaultCases(t, p, cases)
}

// The same for a webhook endpoint that does not dedupe: the effect is at
// most once, so an outcome lost after the receiver acted ends unknown.
func TestEffectsWebhookAtMostOnce(t *testing.T) {
	t.Parallel()
	p := newProviderEnv(t, false, "OUTBOX_MAX_ATTEMPTS=2")
	runFaultCases(t, p, []faultCase{
		{"TooManyRequestsBefore", "webhook", sandbox.Fault{Kind: sandbox.FaultTooManyRequests}, outbox.StateSucceeded, 1},
		{"ServerErrorAfter", "webhook", sandbox.Fault{Kind: sandbox.FaultServerError}, outbox.StateUnknown, 1},
		{"ResetAfter", "webhook", sandbox.Fault{Kind: sandbox.FaultReset}, outbox.StateUnknown, 1},
		{"SlowAfter", "webhook", slow, outbox.StateUnknown, 1},
	})
}

// The seed failure, and a declined card, with a real outboxd
// serve: the Stripe-like stand-in records the charge and answers after the
// client's timeout; River retries with the same Idempotency-Key, the stand-in
// replays its answer, and counts one charge, whose PaymentIntent the intent
// holds. A declined card fails with its decline code, is not retried, and a
// duplicate enqueue gets that same failure back.
func TestEffectsChargeSeedFailureAndDecline(t *testing.T) {
	t.Parallel()
	p := newProviderEnv(t, true)
	ctx := context.Background()

	seed := p.enqueue(t, "order-1234-charge", "charge", effectArgs["charge"])
	p.sb.Stripe.MisbehaveFor(seed.ProviderKey, slow)
	declinedArgs := map[string]any{"customer": "cus_1", "amount": 500, "currency": "usd", "payment_method": sandbox.PaymentMethodDeclined}
	declined := p.enqueue(t, "order-5678-charge", "charge", declinedArgs)
	p.serve()

	t.Run("SeedFailure", func(t *testing.T) {
		intent := p.waitIntent(t, seed.Key, 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, intent.State, "intent: %+v", intent)
		require.GreaterOrEqual(t, intent.Attempts, 2, "the first attempt timed out and River retried")
		require.GreaterOrEqual(t, p.sb.Stripe.RequestsFor(seed.ProviderKey), 2)
		require.Equal(t, 1, p.sb.Stripe.EffectsFor(seed.ProviderKey), "exactly one charge")
		var result struct {
			PaymentIntent string `json:"payment_intent"`
			Replayed      bool   `json:"replayed"`
		}
		require.NoError(t, json.Unmarshal(intent.Result, &result))
		require.Equal(t, p.sb.Stripe.Charges(), []string{result.PaymentIntent}, "the intent holds the one charge's PaymentIntent")
		require.True(t, result.Replayed, "the answer came from Stripe's idempotency replay")
	})

	t.Run("Declined", func(t *testing.T) {
		intent := p.waitIntent(t, declined.Key, 60*time.Second)
		require.Equal(t, outbox.StateFailed, intent.State, "intent: %+v", intent)
		require.Equal(t, "card_declined", intent.Error.Code)
		require.Contains(t, intent.Error.Message, "decline_code generic_decline")
		require.Equal(t, 1, intent.Attempts, "not retried")
		require.Equal(t, 1, p.sb.Stripe.RequestsFor(declined.ProviderKey), "not retried")

		res, err := p.client.EnqueueTx(ctx, p.pool, &outbox.EnqueueParams{Key: declined.Key, Effect: "charge", Args: declinedArgs})
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, outbox.StateFailed, res.Intent.State)
		require.Equal(t, intent.Error, res.Intent.Error, "the duplicate gets the same failure")
		require.Equal(t, 1, p.sb.Stripe.RequestsFor(declined.ProviderKey))
	})
}

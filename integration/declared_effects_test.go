package integration

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// declaredEffectsFile declares a deduplicated charge and a reconcilable
// ticket, both against the sandbox's stand-ins (the same servers the
// built-in charge and ticket use), with nothing but the file.
const declaredEffectsFile = `effects:
  decl_charge:
    description: Charge a card (declared).
    guarantee: deduplicated
    dedupe_window: 24h
    args:
      type: object
      required: [customer, amount, currency]
      properties:
        customer: {type: string}
        amount: {type: integer, minimum: 1}
        currency: {type: string, pattern: "^[a-z]{3}$"}
        payment_method: {type: string}
    request:
      url: "{env.DECL_STRIPE_URL}/v1/payment_intents"
      headers:
        Authorization: "Bearer {env.DECL_STRIPE_KEY}"
        Idempotency-Key: "{provider_key}"
      encoding: form
      body:
        customer: "{args.customer}"
        amount: "{args.amount}"
        currency: "{args.currency}"
        payment_method: "{args.payment_method}"
        confirm: "true"
    outcome:
      - when: status == 402
        class: permanent
        code: card_declined
    result: {id: /id, status: /status}
  decl_ticket:
    description: Open a support ticket (declared).
    guarantee: reconcilable
    args:
      type: object
      required: [subject, body]
      properties: {subject: {type: string}, body: {type: string}}
    request:
      url: "{env.DECL_ZENDESK_URL}/api/v2/tickets.json"
      headers: {Authorization: "Basic {env.DECL_ZENDESK_AUTH}"}
      body:
        ticket: {subject: "{args.subject}", comment: {body: "{args.body}"}, external_id: "{provider_key}"}
    result: {id: /ticket/id}
    lookup:
      url: "{env.DECL_ZENDESK_URL}/api/v2/tickets.json?external_id={provider_key}"
      headers: {Authorization: "Basic {env.DECL_ZENDESK_AUTH}"}
      items: body.tickets
      match: item.external_id == provider_key
      result: {id: /id}
`

// newDeclaredEnv is a providerEnv whose serve also runs the declared
// effects decl_charge and decl_ticket.
func newDeclaredEnv(t *testing.T, extra ...string) *providerEnv {
	t.Helper()
	file := filepath.Join(t.TempDir(), "effects.yaml")
	require.NoError(t, os.WriteFile(file, []byte(declaredEffectsFile), 0o600))
	p := newProviderEnv(t, false, append([]string{"OUTBOX_EFFECTS_FILE=" + file}, extra...)...)
	p.vars = append(p.vars,
		"DECL_STRIPE_URL="+p.sb.Stripe.URL(),
		"DECL_STRIPE_KEY=sk_test_integration",
		"DECL_ZENDESK_URL="+p.sb.Zendesk.URL(),
		"DECL_ZENDESK_AUTH="+base64.StdEncoding.EncodeToString([]byte("agent@example.com/token:zendesk-token")),
	)
	return p
}

// Declared effects under the faults a provider and a crash cause, through
// serve: the stand-in acts and answers after the client's timeout; acts and
// resets the connection; answers 503 or 429 with Retry-After; and serve is
// killed -9 with requests held before and after the provider acted. Every
// intent must end succeeded with exactly one effect at the stand-in.
func TestDeclaredEffectsChaos(t *testing.T) {
	t.Parallel()
	p := newDeclaredEnv(t, "OUTBOX_EFFECT_TIMEOUT=2s")
	faults := []struct {
		name   string
		faults []sandbox.Fault
		kill   bool
	}{
		{"none", nil, false},
		{"slow", []sandbox.Fault{{Kind: sandbox.FaultSlow, Delay: 3 * time.Second}}, false},
		{"reset", []sandbox.Fault{{Kind: sandbox.FaultReset}}, false},
		{"unavailable", []sandbox.Fault{{Kind: sandbox.FaultUnavailable}}, false},
		{"rate_limited", []sandbox.Fault{{Kind: sandbox.FaultTooManyRequests}, {Kind: sandbox.FaultUnavailable}}, false},
		{"kill_before", []sandbox.Fault{{Kind: sandbox.FaultHangBefore}}, true},
		{"kill_after", []sandbox.Fault{{Kind: sandbox.FaultHangAfter}}, true},
	}
	effects := []struct {
		name    string
		args    map[string]any
		standIn standIn
	}{
		{"decl_charge", effectArgs["charge"], p.sb.Stripe},
		{"decl_ticket", effectArgs["ticket"], p.sb.Zendesk},
	}
	first := p.serve()
	type intent struct {
		key     string
		effect  int
		pk      string
		killed  bool
		nFaults int
	}
	var intents []intent
	injected := 0
	for ei, e := range effects {
		for _, f := range faults {
			key := fmt.Sprintf("%s-%s", e.name, f.name)
			tx, err := p.pool.Begin(context.Background())
			require.NoError(t, err)
			res, err := p.client.EnqueueTx(context.Background(), tx, &outbox.EnqueueParams{Key: key, Effect: e.name, Args: e.args})
			require.NoError(t, err)
			e.standIn.MisbehaveFor(res.Intent.ProviderKey, f.faults...)
			require.NoError(t, tx.Commit(context.Background()))
			intents = append(intents, intent{key: key, effect: ei, pk: res.Intent.ProviderKey, killed: f.kill, nFaults: len(f.faults)})
			injected += len(f.faults)
		}
	}
	// The kill lands in work under way: every killed intent's request is
	// held at its stand-in, before or after it acted, and none of them has
	// an outcome recorded.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, in := range intents {
		if in.killed {
			require.NoError(t, effects[in.effect].standIn.WaitHanging(ctx, in.pk), in.key)
		}
	}
	first.kill9()
	for _, in := range intents {
		if in.killed {
			current, err := p.client.Get(ctx, "", in.key)
			require.NoError(t, err)
			require.False(t, current.State.Terminal(), "%s was %s before the kill", in.key, current.State)
		}
	}
	p.serve()

	duplicates, lost := 0, 0
	for _, in := range intents {
		final := p.waitIntent(t, in.key, 150*time.Second)
		n := effects[in.effect].standIn.EffectsFor(in.pk)
		if n > 1 {
			duplicates += n - 1
		}
		if n == 0 || final.State != outbox.StateSucceeded {
			lost++
		}
		require.Equal(t, outbox.StateSucceeded, final.State, "%s: %+v", in.key, final)
		require.Equal(t, 1, n, "%s: effects at the provider", in.key)
	}
	for _, e := range effects {
		require.Equal(t, len(faults), e.standIn.Effects(), "%s: effects, all keys", e.name)
	}
	t.Logf("TestDeclaredEffectsChaos: intents %d, faults injected %d (one kill -9 of serve with 4 requests held), effects %d, duplicates %d, lost %d",
		len(intents), injected, p.sb.Stripe.Effects()+p.sb.Zendesk.Effects(), duplicates, lost)
}

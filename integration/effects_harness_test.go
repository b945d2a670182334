package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// providerEnv is an outboxd environment whose four provider effects (charge,
// email, ticket, webhook) point at a sandbox running in the test process, so
// that the test counts what each stand-in performed. Its webhook effect has
// one endpoint, "hook", deduplicating or not.
type providerEnv struct {
	*env
	sb *sandbox.Sandbox
}

func newProviderEnv(t *testing.T, dedupeWebhook bool, extra ...string) *providerEnv {
	t.Helper()
	sb, err := sandbox.Start(&sandbox.Config{
		StripeAPIKey: "sk_test_integration",
		ZendeskEmail: "agent@example.com",
		ZendeskToken: "zendesk-token",
	})
	require.NoError(t, err)
	// Registered before serve's cleanup, so it runs after: the process is
	// gone before its providers are.
	t.Cleanup(sb.Close)
	hook := "hook=" + sb.Webhooks.EndpointURL("hook", dedupeWebhook)
	if dedupeWebhook {
		hook += ";dedupe"
	}
	vars := append([]string{
		// The noop effects are not needed; the provider variables enable
		// the provider effects.
		"OUTBOX_SANDBOX=false",
		"OUTBOX_STRIPE_URL=" + sb.Stripe.URL(),
		"OUTBOX_STRIPE_KEY=sk_test_integration",
		"OUTBOX_SMTP_ADDR=" + sb.SMTP.Addr(),
		"OUTBOX_SMTP_FROM=Shop <shop@example.com>",
		"OUTBOX_SMTP_TLS=none",
		"OUTBOX_ZENDESK_URL=" + sb.Zendesk.URL(),
		"OUTBOX_ZENDESK_EMAIL=agent@example.com",
		"OUTBOX_ZENDESK_TOKEN=zendesk-token",
		"OUTBOX_WEBHOOKS=" + hook,
		"OUTBOX_WEBHOOK_SECRET=" + sb.Webhooks.Secret(),
	}, extra...)
	return &providerEnv{env: newEnv(t, vars...), sb: sb}
}

// standIn is what a test needs of a sandbox provider.
type standIn interface {
	Effects() int
	EffectsFor(key string) int
	MisbehaveFor(key string, faults ...sandbox.Fault)
	Requests() int
	RequestsFor(key string) int
	WaitHanging(ctx context.Context, key string) error
}

func (p *providerEnv) standIn(effect string) standIn {
	switch effect {
	case "charge":
		return p.sb.Stripe
	case "email":
		return p.sb.SMTP
	case "ticket":
		return p.sb.Zendesk
	case "webhook":
		return p.sb.Webhooks
	}
	panic("no stand-in for " + effect)
}

// effectArgs are valid arguments of each provider effect.
var effectArgs = map[string]map[string]any{
	"charge":  {"customer": "cus_1", "amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"},
	"email":   {"to": []string{"ann@example.com"}, "subject": "Your order", "text": "Shipped."},
	"ticket":  {"subject": "Refund", "body": "Please refund order 1234."},
	"webhook": {"endpoint": "hook", "payload": map[string]any{"type": "order.paid", "order": 1234}},
}

// enqueue records an intent and returns it.
func (p *providerEnv) enqueue(t *testing.T, key, effect string, args map[string]any) *outbox.Intent {
	t.Helper()
	res, err := p.client.EnqueueTx(context.Background(), p.pool, &outbox.EnqueueParams{Key: key, Effect: effect, Args: args})
	require.NoError(t, err)
	return res.Intent
}

// enqueueWithFaults records an intent whose provider requests meet faults,
// one each, in order: the faults are queued at the stand-in under the
// intent's provider key (which its id is part of) before the intent commits,
// so that no attempt can come first.
func (p *providerEnv) enqueueWithFaults(t *testing.T, key, effect string, args map[string]any, faults ...sandbox.Fault) *outbox.Intent {
	t.Helper()
	ctx := context.Background()
	tx, err := p.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	res, err := p.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: key, Effect: effect, Args: args})
	require.NoError(t, err)
	p.standIn(effect).MisbehaveFor(res.Intent.ProviderKey, faults...)
	require.NoError(t, tx.Commit(ctx))
	return res.Intent
}

// waitIntent waits until the intent is terminal, failing t (not the env's
// test) otherwise.
func (p *providerEnv) waitIntent(t *testing.T, key string, timeout time.Duration) *outbox.Intent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	intent, err := p.client.Wait(ctx, "", key)
	require.NoError(t, err, "intent %s did not become terminal (last seen %+v)", key, intent)
	return intent
}

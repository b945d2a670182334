package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/outbox"
)

// scopedEffect is an effect only some namespaces may use, as an MCP
// upstream's tool whose declaration names namespaces.
type scopedEffect struct {
	effects.Effect
	namespaces []string
}

func (e *scopedEffect) Namespaces() []string { return e.namespaces }

// TestNamespaceScopedEffect checks that an effect limited to some
// namespaces is refused to the others on every way in: the library's
// enqueue answers unknown_effect, and an intent written by the SQL
// function, which knows no effects, fails at the drain without reaching
// the effect.
func TestNamespaceScopedEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	inner, err := noop.New(&noop.Config{Name: "scoped", Guarantee: effects.GuaranteeAtMostOnce, Pool: b.pool, Schema: b.schema})
	require.NoError(t, err)
	b.reg, err = effects.NewRegistry(&scopedEffect{Effect: inner, namespaces: []string{"alpha"}})
	require.NoError(t, err)
	b.client, err = outbox.NewClient(b.pool, &outbox.Config{Effects: b.reg, Schema: b.schema})
	require.NoError(t, err)

	_, err = b.client.Enqueue(ctx, &outbox.EnqueueParams{Namespace: "beta", Key: "k", Effect: "scoped", Args: map[string]any{}})
	require.ErrorIs(t, err, outbox.ErrUnknownEffect)
	var outboxErr *outbox.Error
	require.ErrorAs(t, err, &outboxErr)
	require.Equal(t, "effect", outboxErr.Field)
	// Answered as an effect not enabled, naming no namespace.
	require.Equal(t, `unknown_effect: effect: effect "scoped" is not enabled`, err.Error())

	_, err = b.client.Enqueue(ctx, &outbox.EnqueueParams{Namespace: "alpha", Key: "k", Effect: "scoped", Args: map[string]any{}})
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "SELECT * FROM "+pgx.Identifier{b.schema, "enqueue"}.Sanitize()+"('beta', 'k', 'scoped', '{}'::jsonb)")
	require.NoError(t, err)

	d := b.dispatcher(t, nil)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })
	wait := func(namespace string) *outbox.Intent {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got, err := b.client.Wait(waitCtx, namespace, "k")
		require.NoError(t, err)
		return got
	}
	require.Equal(t, outbox.StateSucceeded, wait("alpha").State)
	beta := wait("beta")
	require.Equal(t, outbox.StateFailed, beta.State)
	require.NotNil(t, beta.Error)
	require.Equal(t, outbox.CodeUnknownEffect, beta.Error.Code)
	require.Zero(t, beta.Attempts)
	n, err := noop.Count(ctx, b.pool, b.schema, "")
	require.NoError(t, err)
	require.Equal(t, 1, n, "the effect ran for alpha only")
}

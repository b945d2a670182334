package riverworker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/riverworker"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
)

func TestPruneWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, effects.GuaranteeDeduplicated, nil)
	table := pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()

	// 7 old terminal intents (more than one batch of 3), 1 recent terminal,
	// and old non-terminal ones, which are never pruned.
	oldProviderKeys := map[string]string{}
	hoursAgo := func(h time.Duration) *time.Time { return testfactory.Ptr(time.Now().Add(-h * time.Hour)) }
	// Created before they completed, as every intent is (the prune finds
	// them by created_at).
	states := []outbox.State{outbox.StateSucceeded, outbox.StateFailed, outbox.StateUnknown, outbox.StateCancelled}
	for i := range 7 {
		key := fmt.Sprintf("old-%d", i)
		oldProviderKeys[key] = b.intent(t, key, &testfactory.IntentOpts{State: states[(i+1)%4], CompletedAt: hoursAgo(2), CreatedAt: hoursAgo(3)}).ProviderKey
	}
	b.intent(t, "recent", &testfactory.IntentOpts{State: outbox.StateSucceeded, CompletedAt: testfactory.Ptr(time.Now().Add(-time.Minute))})
	b.intent(t, "old-pending", &testfactory.IntentOpts{CreatedAt: hoursAgo(30 * 24)})
	b.intent(t, "old-running", &testfactory.IntentOpts{State: outbox.StateRunning, CreatedAt: hoursAgo(30 * 24)})

	pruner, err := riverworker.NewPruneWorker(b.pool, &riverworker.PruneWorkerConfig{BatchSize: 3, Retention: time.Hour, Schema: b.schema})
	require.NoError(t, err)
	n, err := pruner.Prune(ctx)
	require.NoError(t, err)

	list, err := b.client.List(ctx, &outbox.ListParams{})
	require.NoError(t, err)
	var kept []string
	var unknown int
	for _, i := range list.Intents {
		if i.State == outbox.StateUnknown {
			// Unknown intents wait for an operator, however old.
			unknown++
			continue
		}
		kept = append(kept, i.Key)
	}
	require.Positive(t, unknown)
	require.Equal(t, int64(7-unknown), n)
	require.ElementsMatch(t, []string{"recent", "old-pending", "old-running"}, kept)

	// Once resolved, an unknown intent ages out from its resolution.
	for _, i := range list.Intents {
		if i.State == outbox.StateUnknown {
			_, err := b.client.Resolve(ctx, &outbox.ResolveParams{Key: i.Key, Outcome: outbox.OutcomeFailed, Note: "checked"})
			require.NoError(t, err)
		}
	}
	n, err = pruner.Prune(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "resolved just now: within retention")
	// An UPDATE rather than testfactory.Intent: these are the intents the
	// test just resolved.
	_, err = b.pool.Exec(ctx, `UPDATE `+table+` SET completed_at = now() - interval '2 hours' WHERE error->>'code' = 'resolved_failed'`)
	require.NoError(t, err)
	n, err = pruner.Prune(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(unknown), n)

	// A pruned key is a new action when enqueued again, with a provider key
	// of its own: a provider that still remembers the old one (Stripe, 24 h)
	// would otherwise answer the new action with the old result.
	require.NotContains(t, kept, "old-1")
	res, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "old-1", Effect: "test", Args: map[string]any{"other": true}})
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.NotEqual(t, oldProviderKeys["old-1"], res.Intent.ProviderKey)
	require.Equal(t, outbox.ProviderKey(outbox.NamespaceDefault, "old-1", res.Intent.ID), res.Intent.ProviderKey)
}

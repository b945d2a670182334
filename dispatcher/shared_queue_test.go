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

// queuedEffect is an effect whose jobs go to a shared queue, as an MCP
// upstream's recorded tools do.
type queuedEffect struct {
	effects.Effect
	queue string
}

func (e *queuedEffect) Queue() string     { return e.queue }
func (e *queuedEffect) AlwaysClaim() bool { return true }

// sharingEffect shares a queue but is not always claimed: a deduplicated
// one would be batched, were it not in a shared queue.
type sharingEffect struct {
	effects.Effect
	queue string
}

func (e *sharingEffect) Queue() string { return e.queue }

// TestSharedQueue checks that effects sharing a River queue
// (effects.Queuer) have their jobs in that queue, each run by its own
// effect once, and that a queue both shared and an effect's own is
// refused. A deduplicated effect in a shared queue is not batched (a batch
// job would run in a queue of the effect's name, which no worker reads).
func TestSharedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var list []effects.Effect
	for _, name := range []string{"tool_a", "tool_b"} {
		e, err := noop.New(&noop.Config{Name: name, Guarantee: effects.GuaranteeAtMostOnce, Pool: b.pool, Schema: b.schema})
		require.NoError(t, err)
		list = append(list, &queuedEffect{Effect: e, queue: "upstream_x"})
	}
	dedup, err := noop.New(&noop.Config{Name: "tool_c", Guarantee: effects.GuaranteeDeduplicated, Pool: b.pool, Schema: b.schema})
	require.NoError(t, err)
	b.reg, err = effects.NewRegistry(append(list, &sharingEffect{Effect: dedup, queue: "upstream_x"})...)
	require.NoError(t, err)
	b.client, err = outbox.NewClient(b.pool, &outbox.Config{Effects: b.reg, Schema: b.schema})
	require.NoError(t, err)
	names := []string{"tool_a", "tool_b", "tool_c", "tool_c2", "tool_c3"}
	var params []*outbox.EnqueueParams
	for _, name := range names {
		params = append(params, &outbox.EnqueueParams{Key: name, Effect: name[:6], Args: map[string]any{}})
	}
	// One transaction, so that tool_c's three would make one batch.
	_, err = b.client.EnqueueMany(ctx, params)
	require.NoError(t, err)

	d := b.dispatcher(t, nil)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })
	for _, name := range names {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := b.client.Wait(waitCtx, "", name)
		cancel()
		require.NoError(t, err)
		require.Equal(t, outbox.StateSucceeded, got.State, name)
		require.NotNil(t, got.JobID)
		var queue, effect string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT queue, args->>'effect' FROM "+pgx.Identifier{b.schema, "river_job"}.Sanitize()+" WHERE id = $1",
			*got.JobID).Scan(&queue, &effect))
		require.Equal(t, "upstream_x", queue, name)
		require.Equal(t, name[:6], effect, "the job names its effect, which its queue does not")
	}
	n, err := noop.Count(ctx, b.pool, b.schema, "")
	require.NoError(t, err)
	require.Equal(t, len(names), n)

	t.Run("RefusedWhenAlsoAnEffectsOwn", func(t *testing.T) {
		t.Parallel()
		own, err := noop.New(&noop.Config{Name: "upstream_x", Pool: b.pool, Schema: b.schema})
		require.NoError(t, err)
		reg, err := effects.NewRegistry(own, list[0])
		require.NoError(t, err)
		_, err = New(b.pool, &Config{Effects: reg, Schema: b.schema})
		require.ErrorContains(t, err, `River queue "upstream_x" would run both`)
	})
}

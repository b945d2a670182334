package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/fixture/noop"
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

// TestSharedQueue checks that effects sharing a River queue
// (effects.Queuer) have their jobs in that queue, each run by its own
// effect once, and that a queue both shared and an effect's own is
// refused.
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
	var err error
	b.reg, err = effects.NewRegistry(list...)
	require.NoError(t, err)
	b.client, err = outbox.NewClient(b.pool, &outbox.Config{Effects: b.reg, Schema: b.schema})
	require.NoError(t, err)
	for _, name := range []string{"tool_a", "tool_b"} {
		_, err := b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: name, Effect: name, Args: map[string]any{}})
		require.NoError(t, err)
	}

	d := b.dispatcher(t, nil)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })
	for _, name := range []string{"tool_a", "tool_b"} {
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
		require.Equal(t, name, effect, "the job names its effect, which its queue does not")
	}
	n, err := noop.Count(ctx, b.pool, b.schema, "")
	require.NoError(t, err)
	require.Equal(t, 2, n)

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

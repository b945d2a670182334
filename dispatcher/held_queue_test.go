package dispatcher

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/outbox"
)

// A replica holding a shared queue (an MCP upstream whose lock differs
// from the recorded one) never works its jobs, and one that lacks a tool
// of the queue (an older lock) never fails that tool's intents: each job
// goes back, nothing claimed, until a replica that runs it takes it, and
// every intent ends succeeded once.
func TestHeldSharedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tool := func(name string) effects.Effect {
		e, err := noop.New(&noop.Config{Name: name, Guarantee: effects.GuaranteeAtMostOnce, Pool: b.pool, Schema: b.schema})
		require.NoError(t, err)
		return &queuedEffect{Effect: e, queue: "upstream_x"}
	}
	full, err := effects.NewRegistry(tool("tool_a"), tool("tool_b"))
	require.NoError(t, err)
	older, err := effects.NewRegistry(tool("tool_a"))
	require.NoError(t, err)
	b.client, err = outbox.NewClient(b.pool, &outbox.Config{Effects: full, Schema: b.schema})
	require.NoError(t, err)
	start := func(reg *effects.Registry, held string) {
		b.reg = reg
		d := b.dispatcher(t, &Config{HeldQueueFunc: func(queue string) string {
			if queue == "upstream_x" {
				return held
			}
			return ""
		}, FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 10 * time.Millisecond})
		require.NoError(t, d.Start(ctx))
		t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })
	}

	// Held: the intent waits, untouched.
	start(full, "its lock differs")
	_, err = b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "held", Effect: "tool_a", Args: map[string]any{}})
	require.NoError(t, err)
	time.Sleep(2 * time.Second)
	got, err := b.client.Get(ctx, "", "held")
	require.NoError(t, err)
	require.Equal(t, outbox.StatePending, got.State)
	require.Zero(t, got.Attempts, "a held queue's job claims nothing")

	// A replica with an older lock (no tool_b) works the queue beside one
	// with every tool: tool_b's intents go to the latter, none fails.
	start(older, "")
	start(full, "")
	const n = 20
	for i := range n {
		_, err = b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: fmt.Sprintf("b%d", i), Effect: "tool_b", Args: map[string]any{}})
		require.NoError(t, err)
	}
	for _, key := range append([]string{"held"}, func() []string {
		var keys []string
		for i := range n {
			keys = append(keys, fmt.Sprintf("b%d", i))
		}
		return keys
	}()...) {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := b.client.Wait(waitCtx, "", key)
		cancel()
		require.NoError(t, err, key)
		require.Equal(t, outbox.StateSucceeded, got.State, "%s: %v", key, got.Error)
	}
	count, err := noop.Count(ctx, b.pool, b.schema, "")
	require.NoError(t, err)
	require.Equal(t, n+1, count, "each once")
}

// An intent whose job waits in a shared queue for a tool no running
// replica has (dropped by a re-pin, its upstream renamed) is reported
// with the effects no replica runs, as one no drain took is.
func TestUnservedSharedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tool := func(name string) effects.Effect {
		e, err := noop.New(&noop.Config{Name: name, Guarantee: effects.GuaranteeAtMostOnce, Pool: b.pool, Schema: b.schema})
		require.NoError(t, err)
		return &queuedEffect{Effect: e, queue: "upstream_x"}
	}
	var err error
	b.reg, err = effects.NewRegistry(tool("tool_a"), tool("tool_b"))
	require.NoError(t, err)
	b.client, err = outbox.NewClient(b.pool, &outbox.Config{Effects: b.reg, Schema: b.schema})
	require.NoError(t, err)
	_, err = b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "b", Effect: "tool_b", Args: map[string]any{}})
	require.NoError(t, err)
	// A replica that ran tool_b gave it its job, then went away.
	n, err := b.dispatcher(t, nil).Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	unserved, err := intentdb.New(b.schema).Unserved(ctx, b.pool, []string{"tool_a"}, 0)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"tool_b": 1}, unserved)
	unserved, err = intentdb.New(b.schema).Unserved(ctx, b.pool, []string{"tool_a", "tool_b"}, 0)
	require.NoError(t, err)
	require.Empty(t, unserved, "a replica that runs it serves it")
}

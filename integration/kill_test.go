package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/outbox"
)

// With the noop effect: outboxd serve is killed with SIGKILL while
// an attempt hangs right before, or right after, the effect is recorded; a new
// process takes over, and effects are counted where the "provider" recorded
// them.
func TestKillServe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		effect, point string
		state         outbox.State
		effects       int
	}{
		// Deduplicated: retried with the same provider key; one effect.
		{"noop", "before", outbox.StateSucceeded, 1},
		{"noop", "after", outbox.StateSucceeded, 1},
		// Reconcilable: looked up once the lease expired; found, or sent.
		{"noop_reconcilable", "before", outbox.StateSucceeded, 1},
		{"noop_reconcilable", "after", outbox.StateSucceeded, 1},
		// At most once: the outcome was lost, so unknown, never resent.
		{"noop_at_most_once", "before", outbox.StateUnknown, 0},
		{"noop_at_most_once", "after", outbox.StateUnknown, 1},
	}
	for _, tc := range cases {
		t.Run(tc.effect+"_"+tc.point, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			first := e.serve()
			res, err := e.client.EnqueueTx(context.Background(), e.pool, &outbox.EnqueueParams{
				Key: "k", Effect: tc.effect,
				Args: map[string]any{"to": "someone", "_noop": map[string]any{"hang": tc.point}},
			})
			require.NoError(t, err)
			first.waitFor("noop effect hanging", 30*time.Second)
			first.kill9()
			killedAt := time.Now()
			// The kill interrupted the attempt: its outcome is not recorded.
			killed, err := e.client.Get(context.Background(), "", "k")
			require.NoError(t, err)
			require.False(t, killed.State.Terminal(), "the attempt ended before the kill: %+v", killed)

			e.serve()
			// River's rescuer takes the dead process's job up once it is
			// older than three effect timeouts and the new process leads.
			intent := e.wait("k", 90*time.Second)
			// docs/design.md ("Crash recovery timing") quotes this figure.
			t.Logf("%s/%s: taken up again and %s %s after the kill", tc.effect, tc.point, intent.State, time.Since(killedAt).Round(100*time.Millisecond))
			require.Equal(t, tc.state, intent.State, "intent: %+v", intent)
			count, err := noop.Count(context.Background(), e.pool, e.schema, res.Intent.ProviderKey)
			require.NoError(t, err)
			require.Equal(t, tc.effects, count, "effects performed at the provider")
			all, err := noop.Count(context.Background(), e.pool, e.schema, "")
			require.NoError(t, err)
			require.Equal(t, tc.effects, all, "effects performed at the provider, all keys")
			if tc.state == outbox.StateUnknown {
				require.Equal(t, "outcome_lost", intent.Error.Code)
			}
		})
	}
}

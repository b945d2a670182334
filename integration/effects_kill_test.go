package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// For each provider effect: outboxd serve is killed with SIGKILL
// while its attempts hang at the provider right before, or right after, the
// provider performed the effect; a new process takes over, and effects are
// counted at the stand-ins. deduplicated (charge, webhook to a deduplicating
// endpoint): retried with the same key, one effect. reconcilable (ticket):
// looked up once the lease expired, found or sent, one ticket, succeeded. at
// most once (email): unknown, and at most one message.
//
// All eight intents hang in one process and are lost by one kill, so the
// wait for River's rescuer is paid once.
func TestEffectsKillServe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		effect  string
		point   sandbox.FaultKind
		state   outbox.State
		effects int
	}{
		{"charge", sandbox.FaultHangBefore, outbox.StateSucceeded, 1},
		{"charge", sandbox.FaultHangAfter, outbox.StateSucceeded, 1},
		{"webhook", sandbox.FaultHangBefore, outbox.StateSucceeded, 1},
		{"webhook", sandbox.FaultHangAfter, outbox.StateSucceeded, 1},
		{"ticket", sandbox.FaultHangBefore, outbox.StateSucceeded, 1},
		{"ticket", sandbox.FaultHangAfter, outbox.StateSucceeded, 1},
		{"email", sandbox.FaultHangBefore, outbox.StateUnknown, 0},
		{"email", sandbox.FaultHangAfter, outbox.StateUnknown, 1},
	}
	// A longer deadline than the harness's, so that no hanging attempt
	// times out before all of them hang and the kill comes.
	p := newProviderEnv(t, true, "OUTBOX_EFFECT_TIMEOUT=3s")
	keys := make([]string, len(cases))
	intents := make([]*outbox.Intent, len(cases))
	first := p.serve()
	for i, tc := range cases {
		keys[i] = tc.effect + "-" + string(tc.point)
		intents[i] = p.enqueueWithFaults(t, keys[i], tc.effect, effectArgs[tc.effect], sandbox.Fault{Kind: tc.point})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, tc := range cases {
		require.NoError(t, p.standIn(tc.effect).WaitHanging(ctx, intents[i].ProviderKey))
	}
	first.kill9()

	// The kill must have interrupted every attempt: none recorded its
	// outcome (a kill after the outcome would pass the same way).
	for i := range cases {
		current, err := p.client.Get(ctx, "", keys[i])
		require.NoError(t, err)
		require.False(t, current.State.Terminal(), "%s was %s before the kill took effect", keys[i], current.State)
	}

	p.serve()
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
		t.Run(keys[i], func(t *testing.T) {
			// River's rescuer takes the dead process's jobs up once they are
			// older than three effect timeouts and the new process leads.
			intent := p.waitIntent(t, keys[i], 120*time.Second)
			require.Equal(t, tc.state, intent.State, "intent: %+v", intent)
			require.Equal(t, tc.effects, p.standIn(tc.effect).EffectsFor(intent.ProviderKey), "effects performed at the provider")
			if tc.state == outbox.StateUnknown {
				require.Equal(t, "outcome_lost", intent.Error.Code)
			}
		})
	}
}

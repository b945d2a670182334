package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
)

// three serve replicas share one database while one of them, at
// random, is killed with SIGKILL and restarted every couple of seconds. The
// effect is reconcilable and its stand-in does not dedupe, so an intent
// executed twice would show as two effects.
func TestReplicasWithRandomKills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// With the reconciler on, and often, so that its repairs (if any) are
	// part of the run.
	e := newEnv(t, "OUTBOX_RECONCILE_INTERVAL=2s")
	replicas := []*process{e.serve(), e.serve(), e.serve()}
	started := slices.Clone(replicas)

	const total = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Spread over the kills, so that processes die with work in hand.
		for batch := 0; batch < total/50; batch++ {
			params := make([]*outbox.EnqueueParams, 50)
			for i := range params {
				key := fmt.Sprintf("k%05d", batch*50+i)
				params[i] = &outbox.EnqueueParams{Key: key, Effect: "noop_reconcilable", Args: map[string]any{"key": key}}
			}
			if _, err := e.client.EnqueueManyTx(ctx, e.pool, params); err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()

	kills := 0
	for range 6 {
		time.Sleep(time.Duration(1500+rand.IntN(1500)) * time.Millisecond)
		i := rand.IntN(len(replicas))
		replicas[i].kill9()
		kills++
		replicas[i] = e.serve()
		started = append(started, replicas[i])
	}
	<-done

	deadline := time.Now().Add(3 * time.Minute)
	var lost, duplicated, effects, succeeded int
	for {
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'succeeded') FROM `+e.table("outbox_intent")).Scan(&succeeded))
		if succeeded == total || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT $1::int - count(*) FILTER (WHERE state = 'succeeded') FROM `+e.table("outbox_intent"), total).Scan(&lost))
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT provider_key) FROM `+e.table("outbox_noop_effect")).Scan(&effects, &duplicated))
	repairs := 0
	for _, p := range started {
		repairs += strings.Count(p.output(), "given a fresh job")
	}
	t.Logf("replicas 3, kills %d, intents %d, succeeded %d, lost %d, effects %d, duplicated %d, reconciler repairs %d",
		kills, total, succeeded, lost, effects, duplicated, repairs)
	require.Zero(t, lost)
	require.Zero(t, duplicated)
	require.Equal(t, total, effects)
}

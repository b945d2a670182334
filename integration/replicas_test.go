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
// random, is killed with SIGKILL and restarted every couple of seconds.
// The effect is deduplicated, so that, with first attempts in batches (the
// default), its intents go in batches and kills land while batches run:
// every intent must still end succeeded, its effect made once at the
// provider (which dedupes on the provider key).
func TestReplicasWithRandomKills(t *testing.T) {
	t.Parallel()
	replicasWithRandomKills(t, true)
}

// The same without batches (OUTBOX_BATCH_FIRST_ATTEMPTS=false), with a
// reconcilable effect whose stand-in does not dedupe, so that an intent
// executed twice would show as two effects.
func TestReplicasWithRandomKillsJobPerIntent(t *testing.T) {
	t.Parallel()
	replicasWithRandomKills(t, false)
}

func replicasWithRandomKills(t *testing.T, batched bool) {
	ctx := context.Background()
	effect := "noop_reconcilable"
	if batched {
		effect = "noop" // deduplicated: its intents go in batches
	}
	// With the reconciler on, and often, so that its repairs (if any) are
	// part of the run.
	extra := []string{"OUTBOX_RECONCILE_INTERVAL=2s"}
	if !batched {
		extra = append(extra, "OUTBOX_BATCH_FIRST_ATTEMPTS=false")
	}
	e := newEnv(t, extra...)
	replicas := []*process{e.serve(), e.serve(), e.serve()}
	started := slices.Clone(replicas)

	// 100 intents a second for 10 s, about what three replicas of 10
	// workers finish at 300 ms an attempt: every kill lands on a replica
	// with work in hand, and none waits on a backlog. (Twice as many, as
	// this test once enqueued, only queued up and doubled its CPU.)
	const total, perBatch = 1000, 25
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Spread over the kills, so that processes die with work in hand.
		for batch := 0; batch < total/perBatch; batch++ {
			params := make([]*outbox.EnqueueParams, perBatch)
			for i := range params {
				key := fmt.Sprintf("k%05d", batch*perBatch+i)
				// Each attempt lasts 300 ms after the effect is recorded,
				// so that kills land mid-attempt: claimed, effect made,
				// outcome not yet recorded.
				params[i] = &outbox.EnqueueParams{Key: key, Effect: effect, Args: map[string]any{"key": key, "_noop": map[string]any{"sleep": "300ms"}}}
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
	// What the kills interrupted: intents claimed more than once (an
	// attempt that died with its lease, then looked up), and River jobs run
	// more than once (rescued).
	var interrupted, rescued int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table("outbox_intent")+` WHERE attempt > 1 OR maybe_sent`).Scan(&interrupted))
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table("river_job")+` WHERE kind = 'outbox_intent' AND attempt > 1`).Scan(&rescued))
	var batches, rescuedBatches int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE attempt > 1) FROM `+e.table("river_job")+` WHERE kind = 'outbox_intent_batch'`).Scan(&batches, &rescuedBatches))
	repairs := 0
	for _, p := range started {
		repairs += strings.Count(p.output(), "given a fresh job")
	}
	t.Logf("%s: replicas 3, kills %d, intents %d, succeeded %d, lost %d, effects %d, duplicated %d, interrupted intents %d, rescued jobs %d, batch jobs %d (rescued %d), reconciler repairs %d",
		effect, kills, total, succeeded, lost, effects, duplicated, interrupted, rescued, batches, rescuedBatches, repairs)
	if batched {
		require.Positive(t, batches, "no batch ran: the run proves nothing of batches")
		require.Positive(t, interrupted+rescued+rescuedBatches, "no kill landed mid-batch: the run proves nothing")
	} else {
		require.Zero(t, batches)
		require.Positive(t, interrupted, "no kill landed mid-attempt: the run proves nothing")
	}
	require.Zero(t, lost)
	require.Zero(t, duplicated)
	require.Equal(t, total, effects)
}

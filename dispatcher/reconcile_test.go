package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// Every way a pending intent loses its River job, repaired by the
// reconciler through a real River client: each intent then succeeds with
// exactly one effect.
func TestReconcilerRepairsLostJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	metrics := workers.NewMetrics(nil)
	// A job per intent, so that each way is done to one intent
	// (TestReconcilerRepairsACancelledBatch has the batched variant).
	d := b.dispatcher(t, &Config{DisableBatchFirstAttempts: true, Metrics: metrics, ReconcileInterval: 100 * time.Millisecond})

	// One intent per way, dispatched (a job each) before River works.
	ways := []string{"cancelled", "deleted", "discarded", "completed", "at_most_once_cancelled"}
	for _, way := range ways {
		effect := "noop"
		if way == "at_most_once_cancelled" {
			effect = "noop_at_most_once"
		}
		_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: way, Effect: effect, Args: map[string]any{}})
		require.NoError(t, err)
	}
	n, err := d.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ways), n)
	jobOf := func(key string) int64 {
		intent, err := b.client.Get(ctx, "", key)
		require.NoError(t, err)
		require.NotNil(t, intent.JobID)
		return *intent.JobID
	}

	// What an operator does in River UI, through River's own API.
	_, err = d.River().JobCancel(ctx, jobOf("cancelled"))
	require.NoError(t, err)
	_, err = d.River().JobCancel(ctx, jobOf("at_most_once_cancelled"))
	require.NoError(t, err)
	_, err = d.River().JobDelete(ctx, jobOf("deleted"))
	require.NoError(t, err)
	// What River does after the attempts, and what a stale attempt of an
	// older version did, written as River writes them.
	_, err = b.pool.Exec(ctx, `UPDATE `+b.table("river_job")+` SET state = 'discarded', finalized_at = now() WHERE id = $1`, jobOf("discarded"))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE `+b.table("river_job")+` SET state = 'completed', finalized_at = now() WHERE id = $1`, jobOf("completed"))
	require.NoError(t, err)

	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })

	for _, way := range ways {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		intent, err := b.client.Wait(waitCtx, "", way)
		cancel()
		require.NoError(t, err, way)
		require.Equal(t, outbox.StateSucceeded, intent.State, way)
		require.Equal(t, 1, noopEffects(t, b, intent.ProviderKey), way)
	}
	for reason, want := range map[string]float64{
		workers.ReconcileReasonJobCancelled: 2,
		workers.ReconcileReasonJobMissing:   1,
		workers.ReconcileReasonJobDiscarded: 1,
		workers.ReconcileReasonJobCompleted: 1,
	} {
		require.Equal(t, want, testutil.ToFloat64(metrics.Reconciled.WithLabelValues(reason)), reason)
	}
}

// The batched variant of TestReconcilerRepairsLostJobs: a batch cancelled
// in River UI before it ran takes all of its intents with it, and the
// reconciler gives each a job of its own; each succeeds with one effect.
func TestReconcilerRepairsACancelledBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	metrics := workers.NewMetrics(nil)
	d := b.dispatcher(t, &Config{Metrics: metrics, ReconcileInterval: 100 * time.Millisecond})
	keys := []string{"a", "b", "c"}
	for _, key := range keys {
		_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
	}
	_, err := d.Drain(ctx)
	require.NoError(t, err)
	var batchID int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM `+b.table("river_job")+` WHERE kind = $1`, workers.IntentBatchArgs{}.Kind()).Scan(&batchID))
	_, err = d.River().JobCancel(ctx, batchID)
	require.NoError(t, err)

	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })
	for _, key := range keys {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		intent, err := b.client.Wait(waitCtx, "", key)
		cancel()
		require.NoError(t, err, key)
		require.Equal(t, outbox.StateSucceeded, intent.State, key)
		require.Equal(t, 1, noopEffects(t, b, intent.ProviderKey), key)
		require.NotEqual(t, batchID, *intent.JobID, "a job of its own")
	}
	require.Equal(t, float64(len(keys)), testutil.ToFloat64(metrics.Reconciled.WithLabelValues(workers.ReconcileReasonJobCancelled)))
}

// A deduplicated attempt killed mid-call leaves its intent pending (it is not
// claimed) and its job with an attempt that recorded nothing; once River
// rescued the job, it is no longer running, but a cancel must still be
// refused: the provider may have acted.
func TestCancelAfterARescuedAttemptIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := b.dispatcher(t, nil)
	for _, key := range []string{"rescued", "retried"} {
		_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
	}
	_, err := d.Drain(ctx)
	require.NoError(t, err)

	// As River's rescuer leaves a job whose attempt died: retryable, its
	// attempt counted.
	_, err = b.pool.Exec(ctx, `UPDATE `+b.table("river_job")+` j SET state = 'retryable', attempt = 1, attempted_at = now()
		FROM `+b.table("outbox_intent")+` i WHERE i.job_id = j.id AND i.key = 'rescued'`)
	require.NoError(t, err)
	_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "rescued"})
	require.ErrorIs(t, err, outbox.ErrNotCancellable)
	require.Contains(t, err.Error(), "an attempt may have started")

	// A job whose attempt recorded its outcome (not sent: nothing reached
	// the provider) may be cancelled.
	_, err = b.pool.Exec(ctx, `UPDATE `+b.table("river_job")+` j SET state = 'retryable', attempt = 1, attempted_at = now()
		FROM `+b.table("outbox_intent")+` i WHERE i.job_id = j.id AND i.key = 'retried'`)
	require.NoError(t, err)
	// An UPDATE, not testfactory.Intent: the intent the drain dispatched.
	_, err = b.pool.Exec(ctx, `UPDATE `+b.table("outbox_intent")+` SET job_attempt = 1 WHERE key = 'retried'`)
	require.NoError(t, err)
	intent, err := b.client.Cancel(ctx, &outbox.CancelParams{Key: "retried"})
	require.NoError(t, err)
	require.Equal(t, outbox.StateCancelled, intent.State)
}

// noopEffects counts the noop effect's records for a provider key: every
// effect it performed, deduplicated or not.
func noopEffects(t *testing.T, b *testBundle, providerKey string) int {
	t.Helper()
	return b.scalar(t, fmt.Sprintf(`SELECT count(*) FROM %s WHERE provider_key = '%s'`, b.table("outbox_noop_effect"), providerKey))
}

// River UI shows what a job is for and what it did, from the job alone: the
// drain puts the intent's namespace and effect in the job's metadata, and
// each attempt records its outcome as the job's output, without the key or
// the arguments.
func TestJobsSayWhatTheyDid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := b.dispatcher(t, nil)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })

	_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Namespace: "billing", Key: "secret-key-7", Effect: "noop", Args: map[string]any{"email": "ann@example.com"}})
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	intent, err := b.client.Wait(waitCtx, "billing", "secret-key-7")
	require.NoError(t, err)
	require.Equal(t, outbox.StateSucceeded, intent.State)

	// The output is written with the job's completion, just after.
	var job *rivertype.JobRow
	require.Eventually(t, func() bool {
		job, err = d.River().JobGet(ctx, *intent.JobID)
		return err == nil && job.State == rivertype.JobStateCompleted
	}, 10*time.Second, 20*time.Millisecond)
	var meta struct {
		Effect    string                `json:"effect"`
		Namespace string                `json:"namespace"`
		Output    workers.AttemptOutput `json:"output"`
	}
	require.NoError(t, json.Unmarshal(job.Metadata, &meta))
	require.Equal(t, "noop", meta.Effect)
	require.Equal(t, "billing", meta.Namespace)
	require.Equal(t, workers.AttemptOutput{Attempt: 1, IntentID: intent.ID, State: "succeeded", ProviderObjectID: meta.Output.ProviderObjectID}, meta.Output)
	require.NotContains(t, string(job.Metadata), "secret-key-7")
	require.NotContains(t, string(job.Metadata), "ann@example.com")
}

// A cancel that waits on the intent's row lock while a drain dispatches the
// intent must be refused once the drain commits: it checked no job, and the
// new job's attempt may start at once (a deduplicated one is not claimed, so
// it could call the provider while the cancel commits).
func TestCancelWhileTheDrainHoldsTheIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "raced", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	d := b.dispatcher(t, nil)

	cancelErr := make(chan error, 1)
	d.drainer.beforeCommitFunc = func(ctx context.Context, tx pgx.Tx) error {
		go func() {
			_, err := b.client.Cancel(context.Background(), &outbox.CancelParams{Key: "raced"})
			cancelErr <- err
		}()
		// Commit only once the cancel waits for the row the drain holds.
		require.Eventually(t, func() bool {
			return b.scalar(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%cancelled%'`) > 0
		}, 10*time.Second, 5*time.Millisecond)
		return nil
	}
	n, err := d.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.ErrorIs(t, <-cancelErr, outbox.ErrNotCancellable)
	intent, err := b.client.Get(ctx, "", "raced")
	require.NoError(t, err)
	require.Equal(t, outbox.StatePending, intent.State)
	require.NotNil(t, intent.JobID)
}

// The drain is woken by the enqueues' notifications, not by its safety poll
// (an hour here): intents enqueued while the dispatcher runs are executed
// within seconds.
func TestDrainWokenByNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := b.dispatcher(t, &Config{DrainPollInterval: time.Hour})
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })
	// Past the start-up drain and its busy tail, so only a notification
	// can wake the drain.
	time.Sleep(busyTail + 500*time.Millisecond)

	for i := range 2 {
		if i > 0 {
			// Past the busy tail again, and past the notify window, so
			// that this enqueue notifies.
			time.Sleep(busyTail + 500*time.Millisecond)
		}
		key := fmt.Sprintf("woken-%d", i)
		_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		intent, err := b.client.Wait(waitCtx, "", key)
		cancel()
		require.NoError(t, err, "not woken within 5 s")
		require.Equal(t, outbox.StateSucceeded, intent.State)
	}
}

package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

type testBundle struct {
	client *outbox.Client
	pool   *pgxpool.Pool
	reg    *effects.Registry
	schema string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	env := testdb.NewEnv(t, map[string]effects.Guarantee{
		"noop": effects.GuaranteeDeduplicated, "noop_reconcilable": effects.GuaranteeReconcilable, "noop_at_most_once": effects.GuaranteeAtMostOnce,
	})
	return &testBundle{client: env.Client, pool: env.Pool, reg: env.Registry, schema: env.Schema}
}

func (b *testBundle) dispatcher(t *testing.T, config *Config) *Dispatcher {
	t.Helper()
	if config == nil {
		config = &Config{}
	}
	config.Effects = b.reg
	config.Schema = b.schema
	if config.EffectTimeout == 0 {
		config.EffectTimeout = 5 * time.Second
	}
	d, err := New(b.pool, config)
	require.NoError(t, err)
	return d
}

func (b *testBundle) enqueueN(t *testing.T, n int, effect string, args map[string]any) {
	t.Helper()
	params := make([]*outbox.EnqueueParams, n)
	for i := range params {
		params[i] = &outbox.EnqueueParams{Key: fmt.Sprintf("k%05d", i), Effect: effect, Args: args}
	}
	_, err := b.client.EnqueueManyTx(context.Background(), b.pool, params)
	require.NoError(t, err)
}

// succeeded waits up to timeout for each intent of params to end, requires
// it succeeded, and returns it.
func (b *testBundle) succeeded(t *testing.T, timeout time.Duration, params ...*outbox.EnqueueParams) []*outbox.Intent {
	t.Helper()
	out := make([]*outbox.Intent, len(params))
	for i, p := range params {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		got, err := b.client.Wait(ctx, "", p.Key)
		cancel()
		require.NoError(t, err, p.Key)
		require.Equal(t, outbox.StateSucceeded, got.State, p.Key)
		out[i] = got
	}
	return out
}

func (b *testBundle) scalar(t *testing.T, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

func (b *testBundle) table(name string) string { return pgx.Identifier{b.schema, name}.Sanitize() }

// requireOneJobEach requires n intents, each in exactly one of jobs River
// jobs (of its own, or a batch), which lists it and runs in its effect's
// queue.
func (b *testBundle) requireOneJobEach(t *testing.T, n, jobs int) {
	t.Helper()
	require.Equal(t, jobs, b.scalar(t, `SELECT count(*) FROM `+b.table("river_job")))
	require.Equal(t, jobs, b.scalar(t, `SELECT count(DISTINCT job_id) FROM `+b.table("outbox_intent")))
	// The jobs list n intents in all ...
	require.Equal(t, n, b.scalar(t, `SELECT coalesce(sum(coalesce(jsonb_array_length(args->'intent_ids'), 1)), 0) FROM `+b.table("river_job")))
	// ... and every intent points at a job that lists it.
	require.Equal(t, n, b.scalar(t, `SELECT count(*) FROM `+b.table("outbox_intent")+` i JOIN `+b.table("river_job")+
		` j ON j.id = i.job_id AND ((j.args->>'intent_id')::bigint = i.id OR j.args->'intent_ids' @> to_jsonb(i.id)) AND j.queue = i.effect`))
}

// batchLine is a batch job's output line of one intent, with the batch.
type batchLine struct {
	workers.BatchIntentOutput
	BatchJobID int64
}

// batchLines returns the output lines of every batch job, by intent id,
// and requires each batch's counts and metadata to agree with its lines.
func (b *testBundle) batchLines(t *testing.T) map[int64]batchLine {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT id, metadata FROM `+b.table("river_job")+` WHERE kind = $1`,
		workers.IntentBatchArgs{}.Kind())
	require.NoError(t, err)
	type batch struct {
		id       int64
		metadata []byte
	}
	var batches []batch
	for rows.Next() {
		var j batch
		require.NoError(t, rows.Scan(&j.id, &j.metadata))
		batches = append(batches, j)
	}
	require.NoError(t, rows.Err())
	lines := map[int64]batchLine{}
	for _, j := range batches {
		var md struct {
			BatchSize int                 `json:"batch_size"`
			Effect    string              `json:"effect"`
			Namespace string              `json:"namespace"`
			Output    workers.BatchOutput `json:"output"`
		}
		require.NoError(t, json.Unmarshal(j.metadata, &md))
		require.Len(t, md.Output.Intents, md.BatchSize, "the metadata's size is the batch's")
		require.NotEmpty(t, md.Effect)
		require.NotEmpty(t, md.Namespace)
		require.Equal(t, md.BatchSize, md.Output.Ended+md.Output.HandedOver+md.Output.Skipped)
		for _, l := range md.Output.Intents {
			_, dup := lines[l.IntentID]
			require.False(t, dup, "intent %d in two batches", l.IntentID)
			lines[l.IntentID] = batchLine{BatchIntentOutput: l, BatchJobID: j.id}
		}
	}
	return lines
}

func TestDrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Each test runs twice: with first attempts in batches (the default),
	// where a drain gives its deduplicated intents one job per effect and
	// namespace, and without, one job per intent. Either way every intent
	// is in exactly one job, and that job lists it.
	for _, variant := range []struct {
		name    string
		disable bool
	}{{"Batched", false}, {"JobPerIntent", true}} {
		t.Run("TwoDrainsRacing"+variant.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			const n = 3000
			b.enqueueN(t, n, "noop", map[string]any{})
			// Small batches, so the two drains interleave many times.
			d1 := b.dispatcher(t, &Config{DisableBatchFirstAttempts: variant.disable, DrainBatchSize: 50})
			d2 := b.dispatcher(t, &Config{DisableBatchFirstAttempts: variant.disable, DrainBatchSize: 50})
			var wg sync.WaitGroup
			counts := make([]int, 2)
			for i, d := range []*Dispatcher{d1, d2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := d.Drain(ctx)
					if err != nil {
						t.Errorf("drain: %v", err)
					}
					counts[i] = c
				}()
			}
			wg.Wait()
			require.Equal(t, n, counts[0]+counts[1])
			require.Positive(t, counts[0])
			require.Positive(t, counts[1])
			jobs := n
			if !variant.disable {
				jobs = n / 50 // one batch per drain transaction
			}
			b.requireOneJobEach(t, n, jobs)
			// Draining again finds nothing.
			c, err := d1.Drain(ctx)
			require.NoError(t, err)
			require.Zero(t, c)
		})

		t.Run("KilledMidBatchLeavesNothing"+variant.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.enqueueN(t, 100, "noop", map[string]any{})
			d := b.dispatcher(t, &Config{DisableBatchFirstAttempts: variant.disable})
			// The drain's backend dies after the jobs were inserted and the
			// intents marked, before commit: as if the process was killed.
			var pid int
			d.drainer.beforeCommitFunc = func(ctx context.Context, tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
				return err
			}
			_, err := d.Drain(ctx)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, pgerrcode.AdminShutdown, pgErr.Code, "the error is the backend's termination")
			// Until the dying backend has rolled back, its rows stay locked and
			// another drain rightly skips them.
			require.Eventually(t, func() bool {
				return b.scalar(t, fmt.Sprintf("SELECT count(*) FROM pg_stat_activity WHERE pid = %d", pid)) == 0
			}, 10*time.Second, 10*time.Millisecond)
			require.Zero(t, b.scalar(t, `SELECT count(*) FROM `+b.table("river_job")))
			require.Equal(t, 100, b.scalar(t, `SELECT count(*) FROM `+b.table("outbox_intent")+` WHERE job_id IS NULL`))

			d.drainer.beforeCommitFunc = nil
			c, err := d.Drain(ctx)
			require.NoError(t, err)
			require.Equal(t, 100, c)
			jobs := 100
			if !variant.disable {
				jobs = 1
			}
			b.requireOneJobEach(t, 100, jobs)
		})
	}

	t.Run("RawSQLIntentsAreValidated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fn := pgx.Identifier{b.schema, "enqueue"}.Sanitize()
		_, err := b.pool.Exec(ctx, `SELECT * FROM `+fn+`('default', 'bad', 'noop', '{"_noop": {"fail": "bogus"}}')`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `SELECT * FROM `+fn+`('default', 'unknown', 'fax', '{}')`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `SELECT * FROM `+fn+`('default', 'good', 'noop', '{}')`)
		require.NoError(t, err)
		d := b.dispatcher(t, nil)
		c, err := d.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, c, "the drain takes only the effects it runs")

		bad, err := b.client.Get(ctx, "", "bad")
		require.NoError(t, err)
		require.Equal(t, outbox.StateFailed, bad.State)
		require.Equal(t, "invalid_args", bad.Error.Code)
		require.Contains(t, bad.Error.Message, "_noop.fail")
		require.Nil(t, bad.JobID)
		// An effect no replica runs is not failed: a replica that runs it
		// may come (a rolling deploy). It waits, pending, without a job.
		unknown, err := b.client.Get(ctx, "", "unknown")
		require.NoError(t, err)
		require.Equal(t, outbox.StatePending, unknown.State)
		require.Nil(t, unknown.JobID)
		require.Equal(t, 1, b.scalar(t, `SELECT count(*) FROM `+b.table("river_job")))
	})

	// A transaction that stays open holds back its own intents, not those
	// committed after it began; they are found once it commits.
	t.Run("LongTransactionHoldsBackOnlyItsOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		long, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = long.Rollback(context.WithoutCancel(ctx)) })
		_, err = b.client.EnqueueTx(ctx, long, &outbox.EnqueueParams{Key: "long", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		b.enqueueN(t, 5, "noop", map[string]any{})

		d := b.dispatcher(t, &Config{DisableBatchFirstAttempts: true})
		c, err := d.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 5, c)
		require.NoError(t, long.Commit(ctx))
		c, err = d.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, c)
		b.requireOneJobEach(t, 6, 6)
	})

	// A drain stopped mid-transaction (its process paused) holds the
	// stream's offset until the server ends its idle transaction
	// (intentdb.DrainIdleTimeout); then the others go on.
	t.Run("StalledDrainReleasesTheStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stalled, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = stalled.Rollback(context.WithoutCancel(ctx)) })
		_, err = intentdb.New(b.schema).LockDrainOffset(ctx, stalled)
		require.NoError(t, err)
		b.enqueueN(t, 3, "noop", map[string]any{})

		waitCtx, cancel := context.WithTimeout(ctx, intentdb.DrainIdleTimeout+30*time.Second)
		defer cancel()
		c, err := b.dispatcher(t, &Config{DisableBatchFirstAttempts: true}).Drain(waitCtx)
		require.NoError(t, err)
		require.Equal(t, 3, c)
		require.Error(t, stalled.Commit(ctx), "the server ended the stalled transaction")
		b.requireOneJobEach(t, 3, 3)
	})

	// A new intent that another transaction holds locked is not waited
	// for (the stream would wait behind it): it is queued, and dispatched
	// once free.
	t.Run("LockedIntentIsQueuedNotWaitedFor", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueueN(t, 3, "noop", map[string]any{})
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
		_, err = tx.Exec(ctx, `SELECT 1 FROM `+b.table("outbox_intent")+` WHERE key = 'k00001' FOR UPDATE`)
		require.NoError(t, err)

		d := b.dispatcher(t, &Config{DisableBatchFirstAttempts: true})
		c, err := d.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, c)
		require.Equal(t, 1, b.scalar(t, `SELECT count(*) FROM `+b.table("outbox_dispatch_queue")))

		require.NoError(t, tx.Rollback(ctx))
		c, err = d.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, c)
		b.requireOneJobEach(t, 3, 3)
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM `+b.table("outbox_dispatch_queue")))
	})

	t.Run("ReplicaWithoutAnEffectLeavesItsIntents", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueueN(t, 5, "noop_at_most_once", map[string]any{})
		// A replica that runs only noop, next to intents of another effect.
		only, err := effects.NewRegistry(mustNoop(t, b, "noop", effects.GuaranteeDeduplicated))
		require.NoError(t, err)
		d, err := New(b.pool, &Config{Effects: only, Schema: b.schema})
		require.NoError(t, err)
		c, err := d.Drain(ctx)
		require.NoError(t, err)
		require.Zero(t, c)
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM `+b.table("outbox_intent")+` WHERE state <> 'pending' OR job_id IS NOT NULL`))

		// A replica that runs it dispatches them.
		c, err = b.dispatcher(t, nil).Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 5, c)
	})
}

func mustNoop(t *testing.T, b *testBundle, name string, g effects.Guarantee) effects.Effect {
	t.Helper()
	e, err := noop.New(&noop.Config{Name: name, Guarantee: g, Pool: b.pool, Schema: b.schema})
	require.NoError(t, err)
	return e
}

func TestDispatcher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ExecutesEveryIntentOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.dispatcher(t, nil)
		require.NoError(t, d.Start(ctx))
		t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })

		// Enqueued one per transaction while the dispatcher runs, so the
		// drain is woken by notifications, not by its start-up pass. The
		// at-most-once noop records every call it gets, so a second send
		// would be counted (the deduplicating noop would hide it).
		const n = 300
		for i := range n {
			_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: fmt.Sprintf("k%d", i), Effect: "noop_at_most_once", Args: map[string]any{"i": i}})
			require.NoError(t, err)
		}
		for i := range n {
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			got, err := b.client.Wait(waitCtx, "", fmt.Sprintf("k%d", i))
			cancel()
			require.NoError(t, err)
			require.Equal(t, outbox.StateSucceeded, got.State)
		}
		count, err := noop.Count(ctx, b.pool, b.schema, "")
		require.NoError(t, err)
		require.Equal(t, n, count)
	})

	// a River UI or JobRetry retry of a completed job runs the job
	// again, and it does nothing.
	t.Run("RetryOfCompletedJobHasNoSecondEffect", func(t *testing.T) {
		t.Parallel()
		for _, effect := range []string{"noop", "noop_reconcilable", "noop_at_most_once"} {
			t.Run(effect, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				d := b.dispatcher(t, nil)
				completed, cancelSub := d.River().Subscribe(river.EventKindJobCompleted)
				defer cancelSub()
				require.NoError(t, d.Start(ctx))
				t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })

				res, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "k", Effect: effect, Args: map[string]any{}})
				require.NoError(t, err)
				waitJob := func() *river.Event {
					timeout := time.After(30 * time.Second)
					for {
						select {
						case ev := <-completed:
							if ev.Job.Kind == (workers.IntentArgs{}).Kind() {
								return ev
							}
						case <-timeout:
							t.Fatal("job did not complete")
							return nil
						}
					}
				}
				ev := waitJob()
				got, err := b.client.Get(ctx, "", "k")
				require.NoError(t, err)
				require.Equal(t, outbox.StateSucceeded, got.State)
				require.Equal(t, ev.Job.ID, *got.JobID)

				_, err = d.River().JobRetry(ctx, ev.Job.ID)
				require.NoError(t, err)
				again := waitJob()
				require.Equal(t, ev.Job.ID, again.Job.ID)
				require.Equal(t, 2, again.Job.Attempt, "the job really ran again")

				count, err := noop.Count(ctx, b.pool, b.schema, res.Intent.ProviderKey)
				require.NoError(t, err)
				require.Equal(t, 1, count)
				after, err := b.client.Get(ctx, "", "k")
				require.NoError(t, err)
				require.Equal(t, got.UpdatedAt, after.UpdatedAt)
			})
		}
	})

	t.Run("DuplicatesAnswerWithTheFirstOutcome", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.dispatcher(t, nil)
		require.NoError(t, d.Start(ctx))
		t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })
		args := map[string]any{"_noop": map[string]any{"fail": "permanent"}}
		_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "declined", Effect: "noop", Args: args})
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got, err := b.client.Wait(waitCtx, "", "declined")
		require.NoError(t, err)
		require.Equal(t, outbox.StateFailed, got.State)
		dup, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "declined", Effect: "noop", Args: args})
		require.NoError(t, err)
		require.True(t, dup.Duplicate)
		require.Equal(t, outbox.StateFailed, dup.Intent.State)
		require.Equal(t, "noop_refused", dup.Intent.Error.Code)
		require.Equal(t, 1, dup.Intent.Attempts, "not retried")
	})

	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := New(b.pool, nil)
		require.ErrorContains(t, err, "Effects must be set")
		_, err = New(b.pool, &Config{Effects: b.reg, Workers: -1})
		require.ErrorContains(t, err, "Workers must be positive")
		empty, err := effects.NewRegistry()
		require.NoError(t, err)
		_, err = New(b.pool, &Config{Effects: empty})
		require.ErrorContains(t, err, "no effect is enabled")
		_, err = New(b.pool, &Config{Effects: b.reg, PollOnly: true})
		require.ErrorContains(t, err, "PollOnly needs SessionPool")
	})

	t.Run("CheckSessionDirect", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A direct pool's connections are sessions: never refused (a
		// transaction pooler's are, in integration's TestPgBouncer).
		require.NoError(t, CheckSession(context.Background(), b.pool))
	})
}

// TestDispatcherStopsCleanly is not parallel, so that goleak sees only its
// own goroutines.
func TestDispatcherStopsCleanly(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	// The shared pool's background goroutines predate this test.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	d := b.dispatcher(t, &Config{EffectTimeout: 500 * time.Millisecond})
	require.NoError(t, d.Start(ctx))
	// An attempt that hangs until its context ends: Stop waits for the
	// effect timeout, then cancels it.
	_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "hang", Effect: "noop_at_most_once",
		Args: map[string]any{"_noop": map[string]any{"hang": "before"}}})
	require.NoError(t, err)
	_, err = b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "ok", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = b.client.Wait(waitCtx, "", "ok")
	require.NoError(t, err)

	require.NoError(t, d.Stop(ctx))
	hung, err := b.client.Get(ctx, "", "hang")
	require.NoError(t, err)
	// Its deadline passed while it hung: at most once, so unknown.
	require.Equal(t, outbox.StateUnknown, hung.State)
}

// TestBatchFirstAttempts covers first attempts in batches, the default
// (Config.DisableBatchFirstAttempts): deduplicated intents are dispatched
// in batch jobs, each ends once, and an intent whose first attempt does not
// end it goes on to a job of its own.
func TestBatchFirstAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	batchKind := workers.IntentBatchArgs{}.Kind()

	t.Run("DrainsIntoBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueueN(t, 300, "noop", map[string]any{})
		_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "amo", Effect: "noop_at_most_once", Args: map[string]any{}})
		require.NoError(t, err)
		d := b.dispatcher(t, nil)
		n, err := d.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 301, n)
		// One batch for the deduplicated effect; the at-most-once intent,
		// which must be claimed, has a job of its own.
		require.Equal(t, 1, b.scalar(t, `SELECT count(*) FROM `+b.table("river_job")+` WHERE kind = '`+batchKind+`'`))
		require.Equal(t, 1, b.scalar(t, `SELECT count(*) FROM `+b.table("river_job")+` WHERE kind = 'outbox_intent' AND queue = 'noop_at_most_once'`))
		// Every deduplicated intent points at the batch, which lists it.
		require.Equal(t, 300, b.scalar(t, `SELECT count(*) FROM `+b.table("outbox_intent")+` i JOIN `+b.table("river_job")+
			` j ON j.id = i.job_id AND j.kind = '`+batchKind+`' AND j.args->'intent_ids' @> to_jsonb(i.id) AND j.queue = i.effect`))
	})

	// What the design guarantees, whatever the machine's load: each intent
	// ends once, with one effect; one that stayed with its batch ended in
	// its first attempt; one that left it has a job of its own, which the
	// batch's output names, with the reason. How many leave is not
	// asserted beyond the failing ones: an attempt that cannot begin within
	// the batch's budget is (correctly) handed over, and how many begin in
	// time depends on the machine (a loaded machine has handed 61 of 200
	// over with a 1 s effect timeout).
	t.Run("EachIntentEndsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.dispatcher(t, nil)
		completed, cancelSub := d.River().Subscribe(river.EventKindJobCompleted)
		defer cancelSub()
		params := make([]*outbox.EnqueueParams, 0, 203)
		for i := range 200 {
			params = append(params, &outbox.EnqueueParams{Key: fmt.Sprintf("k%d", i), Effect: "noop", Args: map[string]any{"i": i}})
		}
		// Their first attempt acts and then fails ambiguously (a 5xx after
		// the provider acted): they must leave their batch, and the second
		// attempt, in a job of its own, resends under the same key. (A
		// failure rather than a hang, so that the test needs no short
		// effect timeout, which is what made the batch's budget tight.)
		for i := range 3 {
			params = append(params, &outbox.EnqueueParams{Key: fmt.Sprintf("fail%d", i), Effect: "noop",
				Args: map[string]any{"_noop": map[string]any{"fail": "ambiguous", "fail_attempts": 1}}})
		}
		_, err := b.client.EnqueueManyTx(ctx, b.pool, params)
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })

		ended := b.succeeded(t, 60*time.Second, params...)
		count, err := noop.Count(ctx, b.pool, b.schema, "")
		require.NoError(t, err)
		require.Equal(t, 203, count, "one effect per intent")
		// River completes a batch job (and stores its output) after its
		// intents ended.
		require.Eventually(t, func() bool {
			return b.scalar(t, `SELECT count(*) FROM `+b.table("river_job")+` WHERE kind = '`+batchKind+`' AND state <> 'completed'`) == 0
		}, 30*time.Second, 50*time.Millisecond)
		lines := b.batchLines(t)
		require.Len(t, lines, 203, "every intent was in a batch")

		stayed := 0
		for _, got := range ended {
			line := lines[got.ID]
			require.NotNil(t, got.JobID, got.Key)
			if line.HandedOverTo == 0 {
				// Ended in the batch, in its first attempt.
				require.Equal(t, 1, got.Attempts, got.Key)
				require.Equal(t, string(outbox.StateSucceeded), line.State, got.Key)
				require.Equal(t, line.BatchJobID, *got.JobID, got.Key)
				require.Equal(t, batchKind, *got.JobKind, "Get names the job's kind")
				require.NotContains(t, got.Key, "fail", "a failed attempt leaves its batch")
				stayed++
				continue
			}
			// Left it: the job of its own the batch names, and why.
			require.Equal(t, line.HandedOverTo, *got.JobID, got.Key)
			require.Equal(t, "outbox_intent", *got.JobKind, got.Key)
			require.Equal(t, 1, b.scalar(t, fmt.Sprintf(`SELECT count(*) FROM %s WHERE id = %d AND kind = 'outbox_intent'`, b.table("river_job"), *got.JobID)), got.Key)
			require.Equal(t, string(outbox.StatePending), line.State, got.Key)
			require.Contains(t, []string{"not_begun", "retry"}, line.HandOverReason, got.Key)
			if strings.HasPrefix(got.Key, "fail") {
				require.Equal(t, "retry", line.HandOverReason, got.Key)
				require.Equal(t, "noop_ambiguous", line.ErrorCode, got.Key)
				require.Equal(t, 2, got.Attempts, "the second attempt, in a job of its own, resent under the same key")
			}
		}
		t.Logf("%d of 200 intents ended in their batch", stayed)
		require.Positive(t, stayed, "the batches ran first attempts")

		// A retry of a completed batch (River UI, or a rescue) runs it
		// again, and it does nothing.
		var batchID int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM `+b.table("river_job")+` WHERE kind = $1 ORDER BY id LIMIT 1`, batchKind).Scan(&batchID))
		var before time.Time
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT max(updated_at) FROM `+b.table("outbox_intent")).Scan(&before))
		_, err = d.River().JobRetry(ctx, batchID)
		require.NoError(t, err)
		timeout := time.After(30 * time.Second)
		for again := false; !again; {
			select {
			case ev := <-completed:
				again = ev.Job.ID == batchID && ev.Job.Attempt == 2
			case <-timeout:
				t.Fatal("the retried batch did not complete")
			}
		}
		count, err = noop.Count(ctx, b.pool, b.schema, "")
		require.NoError(t, err)
		require.Equal(t, 203, count)
		var after time.Time
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT max(updated_at) FROM `+b.table("outbox_intent")).Scan(&after))
		require.Equal(t, before, after, "no intent was written again")
	})

	// A batch stopped by River's job timeout (the lease: twice the effect
	// timeout) hands the intents it has not begun over, untouched, and
	// keeps its slots: the handed-over jobs still run.
	t.Run("StoppedBatchHandsTheRestOver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// One at a time, each first attempt hanging for its effect
		// timeout: the batch's 2 s run ends during the second.
		params := make([]*outbox.EnqueueParams, 5)
		for i := range params {
			params[i] = &outbox.EnqueueParams{Key: fmt.Sprintf("hang%d", i), Effect: "noop", Args: map[string]any{"_noop": map[string]any{"hang": "after"}}}
		}
		_, err := b.client.EnqueueManyTx(ctx, b.pool, params)
		require.NoError(t, err)
		d := b.dispatcher(t, &Config{EffectTimeout: time.Second, Workers: 1})
		require.NoError(t, d.Start(ctx))
		t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })

		b.succeeded(t, 60*time.Second, params...)
		count, err := noop.Count(ctx, b.pool, b.schema, "")
		require.NoError(t, err)
		require.Equal(t, 5, count, "one effect per intent")
		var handedOver, ended int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT (metadata->'output'->>'handed_over')::int, (metadata->'output'->>'ended')::int
			FROM `+b.table("river_job")+` WHERE kind = $1`, batchKind).Scan(&handedOver, &ended))
		require.Equal(t, 5, handedOver)
		require.Zero(t, ended)
		// At least three were never begun in the batch: their first
		// attempt was in a job of their own.
		var untouched int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM `+b.table("outbox_intent")+` i
			JOIN `+b.table("river_job")+` j ON j.id = i.job_id AND j.kind = 'outbox_intent'
			WHERE j.attempt = i.attempt`).Scan(&untouched))
		require.GreaterOrEqual(t, untouched, 3)

		// The stopped batch gave back every slot it took: the next batch
		// runs its intents itself instead of waiting out its timeout.
		next := []*outbox.EnqueueParams{
			{Key: "next0", Effect: "noop", Args: map[string]any{}},
			{Key: "next1", Effect: "noop", Args: map[string]any{}},
		}
		_, err = b.client.EnqueueManyTx(ctx, b.pool, next)
		require.NoError(t, err)
		b.succeeded(t, 30*time.Second, next...)
		// River completes the job (and stores its output) after its
		// intents ended.
		require.Eventually(t, func() bool {
			return b.scalar(t, `SELECT count(*) FROM `+b.table("river_job")+` WHERE kind = '`+batchKind+`' AND state = 'completed'`) == 2
		}, 30*time.Second, 50*time.Millisecond)
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT (metadata->'output'->>'handed_over')::int, (metadata->'output'->>'ended')::int
			FROM `+b.table("river_job")+` WHERE kind = $1 ORDER BY id DESC LIMIT 1`, batchKind).Scan(&handedOver, &ended))
		require.Equal(t, 2, ended, "the second batch ran its intents")
		require.Zero(t, handedOver)
	})
}

// panicky is a deduplicated effect whose first call for each provider key
// panics, as an effect's bug would; later calls act.
type panicky struct {
	mu    sync.Mutex
	calls map[string]int
}

func (*panicky) Name() string                       { return "panicky" }
func (*panicky) Guarantee() effects.Guarantee       { return effects.GuaranteeDeduplicated }
func (*panicky) ValidateArgs(json.RawMessage) error { return nil }
func (e *panicky) Execute(_ context.Context, req *effects.Request) (json.RawMessage, error) {
	e.mu.Lock()
	e.calls[req.ProviderKey]++
	n := e.calls[req.ProviderKey]
	e.mu.Unlock()
	if n == 1 && bytes.Contains(req.Args, []byte(`"panic"`)) {
		panic("an effect's bug")
	}
	return json.RawMessage(`{}`), nil
}

// A panicking attempt in a batch is the attempt's error: the process lives,
// the other attempts end, and the intent goes on to a job of its own,
// marked maybe_sent (whether the provider was called is unknown).
func TestBatchAttemptPanics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	reg, err := effects.NewRegistry(&panicky{calls: map[string]int{}})
	require.NoError(t, err)
	b.reg = reg
	client, err := outbox.NewClient(b.pool, &outbox.Config{Effects: reg, Schema: b.schema})
	require.NoError(t, err)
	b.client = client
	params := []*outbox.EnqueueParams{
		{Key: "calm0", Effect: "panicky", Args: map[string]any{}},
		{Key: "panics", Effect: "panicky", Args: map[string]any{"do": "panic"}},
		{Key: "calm1", Effect: "panicky", Args: map[string]any{}},
	}
	_, err = client.EnqueueManyTx(ctx, b.pool, params)
	require.NoError(t, err)
	d := b.dispatcher(t, nil)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })

	got := b.succeeded(t, 30*time.Second, params...)
	require.Equal(t, []int{1, 2, 1}, []int{got[0].Attempts, got[1].Attempts, got[2].Attempts})
	require.Equal(t, 1, b.scalar(t, `SELECT count(*) FROM `+b.table("outbox_intent")+` i JOIN `+b.table("river_job")+
		` j ON j.id = i.job_id AND j.kind = 'outbox_intent' WHERE i.key = 'panics' AND i.maybe_sent`))
}

// The guards of a batch's writes, in the database: only the batch's current
// run may hand its intents over, and its finish applies only to intents
// still the batch's.
func TestBatchWriteGuards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.enqueueN(t, 2, "noop", map[string]any{})
	d := b.dispatcher(t, nil)
	_, err := d.Drain(ctx)
	require.NoError(t, err)
	var batchID int64
	var ids []int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id, ARRAY(SELECT jsonb_array_elements_text(args->'intent_ids')::bigint)
		FROM `+b.table("river_job")+` WHERE kind = 'outbox_intent_batch'`).Scan(&batchID, &ids))
	require.Len(t, ids, 2)
	q := intentdb.New(b.schema)

	lock := func(attempt int) (bool, []int64) {
		t.Helper()
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		current, owned, err := q.LockBatchForHandOver(ctx, tx, ids, batchID, attempt)
		require.NoError(t, err)
		return current, owned
	}
	current, _ := lock(1)
	require.False(t, current, "an available job is run by no one")
	_, err = b.pool.Exec(ctx, `UPDATE `+b.table("river_job")+` SET state = 'running', attempt = 2 WHERE id = $1`, batchID)
	require.NoError(t, err)
	current, _ = lock(1)
	require.False(t, current, "run 1 is stale once River runs attempt 2")
	current, owned := lock(2)
	require.True(t, current)
	require.Equal(t, ids, owned)

	// A finish fenced on the batch applies while the intent is the
	// batch's, and not once it was handed over.
	finish := func(id, expectJob int64) bool {
		t.Helper()
		applied, err := q.Finish(ctx, b.pool, []intentdb.Finish{{ID: id, Attempt: 1, ExpectState: "pending", ExpectAttempt: 0,
			JobAttempt: 2, ExpectJobID: expectJob, State: "succeeded", Result: json.RawMessage(`{}`)}})
		require.NoError(t, err)
		return applied[intentdb.Applied{ID: id, Attempt: 1}]
	}
	// An UPDATE, not testfactory.Intent: the intent the batch owns.
	_, err = b.pool.Exec(ctx, `UPDATE `+b.table("outbox_intent")+` SET job_id = job_id + 1000 WHERE id = $1`, ids[0])
	require.NoError(t, err)
	require.False(t, finish(ids[0], batchID))
	require.True(t, finish(ids[1], batchID))
}

// gated is a deduplicated effect that counts its calls per provider key and
// holds a call whose arguments say "hold" until release is closed.
type gated struct {
	mu      sync.Mutex
	calls   map[string]int
	held    chan struct{}
	release chan struct{}
}

func (*gated) Name() string                       { return "gated" }
func (*gated) Guarantee() effects.Guarantee       { return effects.GuaranteeDeduplicated }
func (*gated) ValidateArgs(json.RawMessage) error { return nil }
func (e *gated) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	e.mu.Lock()
	e.calls[req.ProviderKey]++
	e.mu.Unlock()
	if bytes.Contains(req.Args, []byte(`"hold"`)) {
		close(e.held)
		select {
		case <-e.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return json.RawMessage(`{}`), nil
}

// An attempt that waited for a slot behind another reads its intent again
// rather than trusting the batch's read: an intent that ended meanwhile is
// not sent again. (That every later attempt of the batch reads again too is
// not tested: it matters only when two slots come free between one
// attempt's wait and the next one's turn, which a test cannot arrange.)
func TestBatchAttemptAfterWaitRereads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := &gated{calls: map[string]int{}, held: make(chan struct{}), release: make(chan struct{})}
	reg, err := effects.NewRegistry(e)
	require.NoError(t, err)
	b.reg = reg
	client, err := outbox.NewClient(b.pool, &outbox.Config{Effects: reg, Schema: b.schema})
	require.NoError(t, err)
	b.client = client
	res, err := client.EnqueueManyTx(ctx, b.pool, []*outbox.EnqueueParams{
		{Key: "first", Effect: "gated", Args: map[string]any{"do": "hold"}},
		{Key: "second", Effect: "gated", Args: map[string]any{}},
	})
	require.NoError(t, err)
	first, second := res[0].Intent, res[1].Intent
	d := b.dispatcher(t, &Config{Workers: 1})
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })

	// The batch read both intents and holds the only slot with the first.
	select {
	case <-e.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt did not begin")
	}
	// Meanwhile the second ends elsewhere (as a job of its own would end
	// it after a re-dispatch): an UPDATE of the intent the batch read.
	_, err = b.pool.Exec(ctx, `UPDATE `+b.table("outbox_intent")+` SET state = 'succeeded', attempt = 1, completed_at = now(),
		result = '{"by": "elsewhere"}' WHERE id = $1`, second.ID)
	require.NoError(t, err)
	close(e.release)

	got := b.succeeded(t, 30*time.Second, &outbox.EnqueueParams{Key: "first"}, &outbox.EnqueueParams{Key: "second"})
	require.JSONEq(t, `{"by": "elsewhere"}`, string(got[1].Result))
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM `+b.table("river_job")+` WHERE kind = '`+workers.IntentBatchArgs{}.Kind()+`' AND state = 'completed'`) == 1
	}, 30*time.Second, 50*time.Millisecond)
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Equal(t, map[string]int{first.ProviderKey: 1}, e.calls, "the second intent was not sent")
}

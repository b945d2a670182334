package integration

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// PostgreSQL restarted, then every backend of the dispatcher
// terminated, while intents keep coming: nothing lost, nothing duplicated,
// and the same outboxd process recovers without a restart. The test runs on
// a cluster of its own, because it restarts it.
func TestPostgresFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{CrashSafe: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })

	const schema = "outbox"
	pool, err := pgxpool.New(ctx, cluster.URL())
	require.NoError(t, err)
	defer pool.Close()
	m, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)

	e := &env{t: t, client: client, pool: pool, schema: schema, vars: []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + cluster.URL(),
		"OUTBOX_SCHEMA=" + schema,
		"OUTBOX_SANDBOX=true",
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_ALLOW_NO_AUTH=true",
		"OUTBOX_EFFECT_TIMEOUT=1s",
		"OUTBOX_WORKERS=10",
	}}
	server := e.serve()

	// Callers enqueue steadily, each key once; a caller whose transaction
	// fails (the database went away) retries the same key, which is the
	// point of keys.
	const total = 600
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		retries  atomic.Int64
		stopTime = time.Now().Add(2 * time.Minute)
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				key := fmt.Sprintf("k%04d", i)
				for {
					err := enqueueOnce(ctx, pool, client, key)
					if err == nil {
						break
					}
					retries.Add(1)
					if time.Now().After(stopTime) {
						t.Errorf("enqueue %s kept failing: %v", key, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	waitProgress := func(n int64) {
		t.Helper()
		require.Eventually(t, func() bool { return next.Load() > n }, time.Minute, 10*time.Millisecond)
	}
	waitProgress(150)
	// The faults' moments on the database's clock, to count the attempts
	// they landed in the middle of.
	var restartAt, terminateAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&restartAt))
	require.NoError(t, cluster.Restart(ctx))
	t.Logf("restarted PostgreSQL at about %d intents", next.Load())

	waitProgress(350)
	// Every backend but this one's: the dispatcher's pool, its listeners,
	// River's, and our own callers'.
	var terminated int
	require.Eventually(t, func() bool {
		return pool.QueryRow(ctx, `SELECT clock_timestamp(), count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()) t`).Scan(&terminateAt, &terminated) == nil
	}, 30*time.Second, 100*time.Millisecond)
	t.Logf("terminated %d backends at about %d intents", terminated, next.Load())
	require.Positive(t, terminated)

	wg.Wait()
	for i := 1; i <= total; i++ {
		intent := e.wait(fmt.Sprintf("k%04d", i), 2*time.Minute)
		require.Equal(t, outbox.StateSucceeded, intent.State, "intent %s", intent.Key)
	}

	var intents, effects, duplicated, interrupted, retriedJobs, spanning int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox.outbox_intent`).Scan(&intents))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT provider_key) FROM outbox.outbox_noop_effect`).Scan(&effects, &duplicated))
	// What the faults interrupted: intents claimed more than once, and
	// River jobs run more than once.
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox.outbox_intent WHERE attempt > 1 OR maybe_sent`).Scan(&interrupted))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox.river_job WHERE kind = 'outbox_intent' AND attempt > 1`).Scan(&retriedJobs))
	// Attempts under way at a fault: begun before it, ended after. A pool
	// that replaced its broken connections in time lets them finish
	// without a retry, which is the point; they were still in the fault.
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox.outbox_intent i JOIN outbox.river_job j ON j.id = i.job_id
		WHERE (j.attempted_at < $1 AND i.completed_at > $1) OR (j.attempted_at < $2 AND i.completed_at > $2)`,
		restartAt, terminateAt).Scan(&spanning))
	t.Logf("intents %d, effects %d, duplicated %d, enqueue retries %d, interrupted intents %d, retried jobs %d, attempts under way at a fault %d",
		intents, effects, duplicated, retries.Load(), interrupted, retriedJobs, spanning)
	require.Positive(t, interrupted+retriedJobs+spanning, "the faults landed in no attempt: the run proves nothing")
	require.Equal(t, total, intents, "nothing lost, nothing enqueued twice")
	require.Equal(t, total, effects, "one effect per intent")
	require.Zero(t, duplicated)

	// The same process is still serving: it recovered by itself.
	select {
	case <-server.done:
		t.Fatal("outboxd exited")
	default:
	}
}

func enqueueOnce(ctx context.Context, pool *pgxpool.Pool, client *outbox.Client, key string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// A reconcilable noop records a row for every call it gets (it
		// does not dedupe), so a second send shows; each attempt lasts
		// 200 ms after the effect, so the restart and the terminations
		// land mid-attempt.
		_, err := client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: key, Effect: "noop_reconcilable",
			Args: map[string]any{"key": key, "_noop": map[string]any{"sleep": "200ms"}}})
		return err
	})
}

package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// The repair of dead processes' jobs, on rows made to look like a cluster
// of processes: one dead (no session, heartbeat old), one paused (heartbeat
// old, but its session still holds its lock, as a SIGSTOPped process's
// does), one that just lost its session (heartbeat fresh). Only the dead
// one's running jobs are made available; an at-most-once intent it ran has
// its lease ended, a reconcilable one keeps its lease; a job out of attempts
// is discarded; two replicas repairing at once rescue each job once.
func TestHeartbeatRescuesDeadProcessesJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	table := func(name string) string { return pgx.Identifier{b.schema, name}.Sanitize() }
	queries := intentdb.New(b.schema)

	// A process counts as dead only once the server has been up longer
	// than the grace (a restart ends every session, the live ones' too):
	// on a cluster the test binary has just started, wait for that.
	require.Eventually(t, func() bool {
		var up bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT now() - pg_postmaster_start_time() > interval '3 seconds'`).Scan(&up))
		return up
	}, 30*time.Second, 50*time.Millisecond)

	// The paused process: registered on a session that stays open.
	paused, err := pgx.Connect(ctx, testdb.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { paused.Close(context.Background()) })
	locked, err := queries.RegisterProcess(ctx, paused, "paused", "host", 1)
	require.NoError(t, err)
	require.True(t, locked)
	// The dead one registered too, on a session that then ended.
	dead, err := pgx.Connect(ctx, testdb.URL(t))
	require.NoError(t, err)
	_, err = queries.RegisterProcess(ctx, dead, "dead", "host", 2)
	require.NoError(t, err)
	require.NoError(t, dead.Close(ctx))
	// Its backend exits, and releases the lock, a moment after the close.
	require.Eventually(t, func() bool {
		var held bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN `+table("outbox_process")+` p ON l.objid = p.lock_key::oid
			WHERE l.locktype = 'advisory' AND l.classid = $1::oid AND p.client_id = 'dead')`, intentdb.LivenessClass(b.schema)).Scan(&held))
		return !held
	}, 10*time.Second, 10*time.Millisecond)
	_, err = b.pool.Exec(ctx, `INSERT INTO `+table("outbox_process")+` (client_id) VALUES ('reconnecting')`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE `+table("outbox_process")+` SET heartbeat_at = now() - interval '10 seconds' WHERE client_id IN ('dead', 'paused')`)
	require.NoError(t, err)

	// A running job per case, and the claimed intents two of them run.
	job := func(client string, attempt, maxAttempts int) int64 {
		var id int64
		require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO `+table("river_job")+` (state, attempt, max_attempts, attempted_at, attempted_by, args, kind, queue)
			VALUES ('running', $1, $2, now(), ARRAY['someone-before', $3], '{}', 'outbox_intent', 'noop') RETURNING id`, attempt, maxAttempts, client).Scan(&id))
		return id
	}
	intent := func(key, effect string, jobID int64) int64 {
		return testfactory.Intent(ctx, t, b.pool, &testfactory.IntentOpts{
			Attempt: testfactory.Ptr(1), Effect: effect, JobID: &jobID, Key: key,
			LeaseExpiresAt: testfactory.Ptr(time.Now().Add(time.Hour)), Schema: b.schema, State: outbox.StateRunning,
		}).ID
	}
	atMostOnceJob, reconcilableJob, dedupJob, spentJob := job("dead", 1, 5), job("dead", 1, 5), job("dead", 2, 5), job("dead", 5, 5)
	pausedJob, reconnectingJob := job("paused", 1, 5), job("reconnecting", 1, 5)
	atMostOnce := intent("amo", "noop_at_most_once", atMostOnceJob)
	reconcilable := intent("rec", "noop_reconcilable", reconcilableJob)

	// Two replicas repair at once.
	metrics := workers.NewMetrics(nil)
	config := &Config{Effects: b.reg, Schema: b.schema, HeartbeatInterval: time.Second, Logger: slog.New(slog.DiscardHandler), Metrics: metrics}
	var (
		wg     sync.WaitGroup
		counts [2]int
		errs   [2]error
	)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], errs[i] = newHeartbeat(b.pool, b.pool, config, fmt.Sprintf("replica-%d", i)).rescue(ctx)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, 4, counts[0]+counts[1], "each of the dead process's jobs rescued once")
	require.Equal(t, 4.0, testutil.ToFloat64(metrics.Rescued), "outbox_jobs_rescued_total counts them")

	states := map[int64]string{}
	rows, err := b.pool.Query(ctx, `SELECT id, state::text FROM `+table("river_job"))
	require.NoError(t, err)
	for rows.Next() {
		var (
			id    int64
			state string
		)
		require.NoError(t, rows.Scan(&id, &state))
		states[id] = state
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[int64]string{
		atMostOnceJob: "available", reconcilableJob: "available", dedupJob: "available", spentJob: "discarded",
		pausedJob: "running", reconnectingJob: "running",
	}, states)

	var amoExpired, recExpired bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT lease_expires_at <= now() FROM `+table("outbox_intent")+` WHERE id = $1`, atMostOnce).Scan(&amoExpired))
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT lease_expires_at <= now() FROM `+table("outbox_intent")+` WHERE id = $1`, reconcilable).Scan(&recExpired))
	require.True(t, amoExpired, "an at-most-once attempt that died ends its lease: its intent ends unknown at once")
	require.False(t, recExpired, "a reconcilable attempt that died keeps its lease: no look-up before it ends")

	// The paused process resumes and beats: still alive, nothing to do.
	require.NoError(t, queries.Heartbeat(ctx, paused, "paused"))
	n, err := newHeartbeat(b.pool, b.pool, config, "replica-0").rescue(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// A dispatcher registers its process before River runs and removes it on a
// graceful stop.
func TestHeartbeatRegistersProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := b.dispatcher(t, &Config{HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, d.Start(ctx))
	var (
		clientID string
		locked   bool
	)
	q := `SELECT p.client_id, EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objid = p.lock_key::oid AND l.classid = $1::oid AND l.granted)
		FROM ` + pgx.Identifier{b.schema, "outbox_process"}.Sanitize() + ` p`
	require.NoError(t, b.pool.QueryRow(ctx, q, intentdb.LivenessClass(b.schema)).Scan(&clientID, &locked))
	require.Equal(t, d.River().ID(), clientID)
	require.True(t, locked)
	require.NoError(t, d.Stop(ctx))
	err := b.pool.QueryRow(ctx, q, intentdb.LivenessClass(b.schema)).Scan(&clientID, &locked)
	require.ErrorIs(t, err, pgx.ErrNoRows)
}

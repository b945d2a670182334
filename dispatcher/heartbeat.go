package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/workers"
)

// HeartbeatIntervalDefault is Config.HeartbeatInterval's default.
const HeartbeatIntervalDefault = time.Second

// processRowRetention is how long the row of a dead process is kept. Its
// jobs are repaired on every beat meanwhile; past this, River's rescuer has
// surely dealt with any this repair missed.
const processRowRetention = time.Hour

// beatTimeoutMin bounds a beat's statements, at the least.
const beatTimeoutMin = 5 * time.Second

// rescueBatchSize is how many jobs of dead processes one transaction
// repairs.
const rescueBatchSize = 1000

// heartbeat keeps this process's liveness (docs/design.md, "Crash recovery
// timing") and, on every beat, makes the running jobs of dead processes
// available again. It runs on every replica, not only River's leader: the
// leader may be the process that died, and a new one is elected only about
// 15 s later. Replicas repair concurrently: each locks the jobs it repairs
// with SKIP LOCKED.
//
// Liveness is a session: the process holds a session-level advisory lock on
// a connection of its own for as long as it runs. A process that is killed
// or crashes loses its sockets, PostgreSQL ends its sessions and releases
// the lock, and the other replicas see it dead once its last heartbeat is
// older than the grace period. A process that is paused (SIGSTOP), slow, or
// cut off from the provider keeps its session: it is not dead, its jobs are
// left to the lease and River's rescuer, and its late writes stay fenced on
// the attempt number, as every late write is.
type heartbeat struct {
	clientID string
	effects  *effects.Registry
	grace    time.Duration
	interval time.Duration
	logger   *slog.Logger
	pool     *pgxpool.Pool
	queries  *intentdb.Queries
	// sessionPool gives the liveness session (Config.SessionPool).
	sessionPool *pgxpool.Pool
	// rescued counts the jobs rescued in committed transactions
	// (outbox_jobs_rescued_total).
	rescued prometheus.Counter

	// conn is the liveness session, nil while it is being replaced. Only
	// the beat's goroutine uses it once start returned.
	conn   *pgx.Conn
	locked bool
	beats  int
}

func newHeartbeat(pool, sessionPool *pgxpool.Pool, c *Config, clientID string) *heartbeat {
	metrics := c.Metrics
	if metrics == nil {
		metrics = workers.NewMetrics(nil)
	}
	return &heartbeat{
		clientID: clientID,
		effects:  c.Effects,
		// Two beats: a live process that lost its session (PostgreSQL
		// ended it, a network blip) has opened a new one and taken its
		// lock again well within that.
		grace:       2 * c.HeartbeatInterval,
		interval:    c.HeartbeatInterval,
		logger:      c.Logger,
		rescued:     metrics.Rescued,
		pool:        pool,
		queries:     intentdb.New(c.Schema),
		sessionPool: sessionPool,
	}
}

// start registers the process and takes its lock. It runs before River
// starts, so that every job River fetches for this client is covered.
func (h *heartbeat) start(ctx context.Context) error {
	if err := h.connect(ctx); err != nil {
		return fmt.Errorf("error registering the process's liveness: %w", err)
	}
	h.logger.InfoContext(ctx, "process registered for liveness: replicas take its running jobs over within seconds if it dies",
		slog.String("client_id", h.clientID))
	return nil
}

// connect opens the liveness session and registers on it.
func (h *heartbeat) connect(ctx context.Context) error {
	pc, err := h.sessionPool.Acquire(ctx)
	if err != nil {
		return err
	}
	// Out of the pool: the session must stay this process's own for its
	// whole life, never be closed as idle nor lent to a statement.
	conn := pc.Hijack()
	if err := checkSession(ctx, conn, &h.sessionPool.Config().ConnConfig.Config); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return err
	}
	hostname, _ := os.Hostname()
	locked, err := h.queries.RegisterProcess(ctx, conn, h.clientID, hostname, os.Getpid())
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return err
	}
	h.conn, h.locked = conn, locked
	return nil
}

// run beats every interval until ctx ends.
func (h *heartbeat) run(ctx context.Context) {
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		h.beat(ctx)
		if _, err := h.rescue(ctx); err != nil && ctx.Err() == nil {
			h.logger.WarnContext(ctx, "error rescuing the jobs of dead processes", slog.String("error", err.Error()))
		}
	}
}

// beat writes the heartbeat on the liveness session, replacing the session
// (and taking the lock again) when it was lost.
func (h *heartbeat) beat(ctx context.Context) {
	// Generous: a heartbeat written late is harmless while the session
	// (and its lock) lives, whereas replacing the session on a slow
	// database would drop the lock for a moment.
	bctx, cancel := context.WithTimeout(ctx, max(h.interval, beatTimeoutMin))
	defer cancel()
	h.beats++
	if h.conn != nil {
		err := h.queries.Heartbeat(bctx, h.conn, h.clientID)
		if err == nil && !h.locked {
			// An old session of ours held the lock when we registered; it
			// has likely gone since.
			err = h.relock(bctx)
		}
		if err == nil {
			if h.beats%60 == 0 {
				if _, err := h.queries.PruneProcesses(bctx, h.conn, processRowRetention); err != nil && ctx.Err() == nil {
					h.logger.WarnContext(ctx, "error pruning the rows of dead processes", slog.String("error", err.Error()))
				}
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		h.logger.WarnContext(ctx, "liveness session lost: opening a new one", slog.String("error", err.Error()))
		_ = h.conn.Close(context.WithoutCancel(ctx))
		h.conn = nil
	}
	if err := h.connect(bctx); err != nil && ctx.Err() == nil {
		h.logger.WarnContext(ctx, "error opening the liveness session: replicas may take this process for dead", slog.String("error", err.Error()))
	}
}

func (h *heartbeat) relock(ctx context.Context) error {
	hostname, _ := os.Hostname()
	locked, err := h.queries.RegisterProcess(ctx, h.conn, h.clientID, hostname, os.Getpid())
	h.locked = locked
	return err
}

// rescue makes the running jobs of dead processes available again, a batch
// per transaction, and returns how many it rescued.
func (h *heartbeat) rescue(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := dbutil.WithTxV(ctx, h.pool, func(tx pgx.Tx) (int, error) { return h.rescueBatch(ctx, tx) })
		if err == nil {
			total += n
			h.rescued.Add(float64(n))
		}
		if err != nil || n < rescueBatchSize {
			return total, err
		}
	}
}

func (h *heartbeat) rescueBatch(ctx context.Context, tx pgx.Tx) (int, error) {
	jobs, err := h.queries.LockDeadJobs(ctx, tx, h.grace, rescueBatchSize)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	var (
		jobIDs             []int64
		intentIDs          []int64
		attempts           []int
		seen               = make(map[int64]bool, len(jobs))
		byClient           = map[string]int{}
		atMostOnceEndedNow = 0
	)
	for _, j := range jobs {
		if !seen[j.ID] {
			seen[j.ID] = true
			jobIDs = append(jobIDs, j.ID)
			byClient[j.ClientID]++
		}
		if j.IntentID != nil && endsOnLostOutcome(h.effects, *j.Effect, j.Args) {
			intentIDs = append(intentIDs, *j.IntentID)
			attempts = append(attempts, *j.Attempt)
		}
	}
	if len(intentIDs) > 0 {
		// The dead attempt's lease is ended only where nothing will be sent
		// again: a reconcilable intent keeps it, so that its look-up comes
		// after the time a request still held by the provider may take.
		if err := h.queries.ExpireLeases(ctx, tx, intentIDs, attempts); err != nil {
			return 0, fmt.Errorf("error ending the leases of dead attempts: %w", err)
		}
		atMostOnceEndedNow = len(intentIDs)
	}
	n, err := h.queries.RescueJobs(ctx, tx, jobIDs)
	if err != nil {
		return 0, fmt.Errorf("error rescuing the jobs of dead processes: %w", err)
	}
	// Logged before the commit is known: a failed commit leaves the jobs
	// running, and the next beat rescues (and logs) them again.
	for client, count := range byClient {
		h.logger.WarnContext(ctx, "process died with jobs running: they are available again",
			slog.String("dead_client_id", client), slog.Int("jobs", count), slog.Int("leases_ended", atMostOnceEndedNow))
	}
	return int(n), nil
}

// endsOnLostOutcome reports whether an intent's attempt that died can only
// end it unknown, never resend it: at-most-once, as the worker judges it
// (a reconcilable guarantee without a look-up counts as at-most-once). For an
// effect this replica does not run, the guarantee is unknown: the lease is
// kept, as if the intent were reconcilable.
func endsOnLostOutcome(registry *effects.Registry, effect string, args json.RawMessage) bool {
	e, ok := registry.Get(effect)
	if !ok {
		return false
	}
	switch effects.GuaranteeOf(e, args) {
	case effects.GuaranteeAtMostOnce:
		return true
	case effects.GuaranteeReconcilable:
		_, canLookup := e.(effects.Reconciler)
		return !canLookup
	}
	return false
}

// stop unregisters the process and ends its liveness session. Call it once
// River has stopped: no job is then running under this client.
func (h *heartbeat) stop(ctx context.Context) {
	var db intentdb.DBTX = h.pool
	if h.conn != nil {
		db = h.conn
	}
	if err := h.queries.UnregisterProcess(ctx, db, h.clientID); err != nil && !errors.Is(err, context.Canceled) {
		h.logger.WarnContext(ctx, "error unregistering the process", slog.String("error", err.Error()))
	}
	if h.conn != nil {
		_ = h.conn.Close(ctx)
		h.conn = nil
	}
}

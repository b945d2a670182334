package riverworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// ReconcileBatchSizeDefault is ReconcileWorkerConfig.BatchSize's default.
const ReconcileBatchSizeDefault = 1000

// ReconcileWorkerConfig configures a ReconcileWorker.
type ReconcileWorkerConfig struct {
	// ApprovalTTL is how long an intent may await approval; the reconciler
	// cancels older ones with error approval_expired. Defaults to
	// workers.ApprovalTTLDefault.
	ApprovalTTL time.Duration

	// BatchSize is how many intents one transaction repairs. Defaults to
	// ReconcileBatchSizeDefault.
	BatchSize int

	// Effects are the effects this replica runs. The reconciler repairs the
	// intents of every effect (it only gives them a fresh job, which a drain
	// of a replica that runs the effect dispatches), and uses an effect's
	// guarantee to judge what a lost job may hide; for an effect it does not
	// run, it assumes the worst. Required.
	Effects *effects.Registry

	// Interval is how often the reconciler runs. It is also the age past
	// which a pending intent of an effect no replica took is reported.
	// Defaults to workers.ReconcileIntervalDefault.
	Interval time.Duration

	// Logger receives a line per repair, and a warning per effect that has
	// pending intents no replica takes. Defaults to a logger that discards.
	Logger *slog.Logger

	// Metrics receives outbox_reconciled_total. Defaults to unregistered
	// metrics.
	Metrics *workers.Metrics

	// Schema holds the outbox tables. Defaults to outbox.SchemaDefault.
	Schema string
}

// ReconcileWorker is the safety net under the intent state machine: every
// way an intent can lose its River job (a job cancelled or deleted in River
// UI, discarded after its attempts, completed by a stale attempt of an
// older version, a crash between two steps) ends here, and the intent gets
// a fresh job. What the fresh job's attempt may do is decided as for any
// attempt, by Decide: a deduplicated intent is sent again with the same
// provider key (unknown once past the provider's window), a reconcilable one
// is looked up first, an at-most-once one that may have been sent ends
// unknown without being sent.
//
// River's leader inserts it as a periodic job, so one replica reconciles at
// a time.
type ReconcileWorker struct {
	river.WorkerDefaults[workers.ReconcileArgs]

	approvalTTL time.Duration
	batchSize   int
	effects     *effects.Registry
	interval    time.Duration
	logger      *slog.Logger
	metrics     *workers.Metrics
	pool        *pgxpool.Pool
	queries     *intentdb.Queries
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *ReconcileWorkerConfig) withDefaults() *ReconcileWorkerConfig {
	if c == nil {
		c = &ReconcileWorkerConfig{}
	}
	out := *c
	if out.ApprovalTTL == 0 {
		out.ApprovalTTL = workers.ApprovalTTLDefault
	}
	if out.BatchSize == 0 {
		out.BatchSize = ReconcileBatchSizeDefault
	}
	if out.Interval == 0 {
		out.Interval = workers.ReconcileIntervalDefault
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Metrics == nil {
		out.Metrics = workers.NewMetrics(nil)
	}
	if out.Schema == "" {
		out.Schema = outbox.SchemaDefault
	}
	return &out
}

// validate checks a config with its defaults.
func (c *ReconcileWorkerConfig) validate() error {
	if c.Effects == nil {
		return errors.New("workers: Effects must be set")
	}
	if c.BatchSize < 0 || c.Interval < 0 || c.ApprovalTTL < 0 {
		return errors.New("workers: ApprovalTTL, BatchSize and Interval must be positive")
	}
	return nil
}

// NewReconcileWorker returns a ReconcileWorker.
func NewReconcileWorker(pool *pgxpool.Pool, config *ReconcileWorkerConfig) (*ReconcileWorker, error) {
	c := config.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &ReconcileWorker{
		approvalTTL: c.ApprovalTTL,
		batchSize:   c.BatchSize,
		effects:     c.Effects,
		interval:    c.Interval,
		logger:      c.Logger,
		metrics:     c.Metrics,
		pool:        pool,
		queries:     intentdb.New(c.Schema),
	}, nil
}

// Work repairs every stranded intent, expires approvals nobody gave in
// time, then reports effects whose pending intents no replica takes.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[workers.ReconcileArgs]) error {
	if _, err := w.Reconcile(ctx); err != nil {
		return err
	}
	if _, err := w.ExpireApprovals(ctx); err != nil {
		return err
	}
	unserved, err := w.queries.Unserved(ctx, w.pool, w.effects.Names(), w.interval)
	if err != nil {
		return fmt.Errorf("error counting unserved intents: %w", err)
	}
	for effect, n := range unserved {
		w.logger.WarnContext(ctx, "pending intents of an effect this replica does not run, and no other replica took: they wait for a replica that runs it",
			slog.String("effect", effect), slog.Int64("count", n))
	}
	return nil
}

// ExpireApprovals cancels, with error approval_expired, every intent that
// has awaited approval for longer than the TTL, and returns how many.
func (w *ReconcileWorker) ExpireApprovals(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := w.queries.ExpireApprovals(ctx, w.pool, w.approvalTTL, w.batchSize)
		total += n
		if err != nil {
			return total, fmt.Errorf("error expiring approvals: %w", err)
		}
		if n > 0 {
			w.metrics.Approvals.WithLabelValues(string(outbox.ApprovalExpired)).Add(float64(n))
			w.logger.InfoContext(ctx, "intents not approved in time: cancelled with approval_expired",
				slog.Int64("count", n), slog.Duration("ttl", w.approvalTTL))
		}
		if n < int64(w.batchSize) {
			return total, nil
		}
	}
}

// Reconcile gives every stranded intent a fresh job, a batch per
// transaction, and returns how many it repaired.
func (w *ReconcileWorker) Reconcile(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := dbutil.WithTxV(ctx, w.pool, func(tx pgx.Tx) (int, error) { return w.reconcileBatch(ctx, tx) })
		total += n
		if err != nil {
			return total, fmt.Errorf("error reconciling intents: %w", err)
		}
		if n < w.batchSize {
			return total, nil
		}
	}
}

func (w *ReconcileWorker) reconcileBatch(ctx context.Context, tx pgx.Tx) (int, error) {
	stranded, err := w.queries.SelectStranded(ctx, tx, w.batchSize)
	if err != nil || len(stranded) == 0 {
		return 0, err
	}
	ids := make([]int64, len(stranded))
	maybeSent := make([]bool, len(stranded))
	for i, s := range stranded {
		ids[i] = s.ID
		maybeSent[i] = mayHaveBeenSent(w.effects, &s)
	}
	if _, err := w.queries.Redispatch(ctx, tx, ids, maybeSent); err != nil {
		return 0, err
	}
	// Counted and logged before the commit is known: a failed commit
	// leaves the intents stranded, and the next run repairs and counts
	// them again, which a reader of the log will take for what it is.
	for i, s := range stranded {
		reason := workers.ReconcileReasonJobMissing
		if s.JobState != nil {
			reason = "job_" + *s.JobState
		}
		w.metrics.Reconciled.WithLabelValues(reason).Inc()
		w.logger.WarnContext(ctx, "intent's River job was finished or gone while the intent was not terminal: given a fresh job",
			slog.Int64("intent_id", s.ID), slog.String("effect", s.Effect), slog.String("state", s.State),
			slog.String("reason", reason), slog.Bool("maybe_sent", maybeSent[i]))
	}
	return len(stranded), nil
}

// mayHaveBeenSent reports whether a stranded intent's lost job may have
// reached the provider in an attempt the intent does not show. A claimed
// attempt shows (the intent is running, and its claim counted), so only the
// deduplicated path, which is not claimed, needs the job: an attempt counter
// past the last attempt that recorded an outcome, or a job gone with its
// counter, may hide an attempt that died mid-call. With a fresh job that
// counter restarts, so what it said is kept in maybe_sent.
//
// For an effect this replica does not run, the guarantee is unknown, and the
// job's counter is judged as for a deduplicated effect: possibly sent. An
// at-most-once intent so marked ends unknown rather than be sent twice.
func mayHaveBeenSent(registry *effects.Registry, s *intentdb.Stranded) bool {
	if s.MaybeSent {
		return true
	}
	if effect, ok := registry.Get(s.Effect); ok && effects.GuaranteeOf(effect, s.Args) != effects.GuaranteeDeduplicated {
		return false
	}
	return s.JobAttempts == nil || *s.JobAttempts > s.JobAttempt
}

package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/riverworker"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/workers"
)

// Defaults of Config.
const (
	DrainBatchSizeDefault    = 1000
	DrainPollIntervalDefault = 1 * time.Second
	FetchCooldownDefault     = 10 * time.Millisecond
	FetchPollIntervalDefault = 100 * time.Millisecond
	PruneIntervalDefault     = 10 * time.Minute
	WorkersDefault           = 50
)

// QueueMaintenance is the River queue of outbox's own periodic jobs.
const QueueMaintenance = "outbox_maintenance"

// Config configures a Dispatcher.
type Config struct {
	// ApprovalTTL is how long an intent may await approval before it is
	// cancelled with error approval_expired. Defaults to
	// workers.ApprovalTTLDefault.
	ApprovalTTL time.Duration

	// ApprovalWebhook, when set, names an endpoint of the webhook effect
	// (which must be enabled) that is told of every intent entering
	// awaiting_approval (workers.ApprovalNoticeArgs). Defaults to none.
	ApprovalWebhook string

	// DisableBatchFirstAttempts turns off first attempts in batches. By
	// default the intents of deduplicated effects that one drain takes are
	// dispatched as one River job per effect and namespace
	// (workers.IntentBatchArgs, kind outbox_intent_batch), which runs
	// their first attempts; an intent needing another attempt gets a job of
	// its own. It saves River's writes per intent; docs/design.md ("First
	// attempts in batches") has what it costs. The field is a Disable rather
	// than an Enable, as River's are for behaviour on by default
	// (InsertOpts.DisableUniqueEnforcement, Config.SkipUnknownJobCheck):
	// the zero Config gets the default, and a caller can still turn it off. Defaults to false: batches on.
	DisableBatchFirstAttempts bool

	// DrainBatchSize is how many intents one drain transaction dispatches.
	// Defaults to DrainBatchSizeDefault.
	DrainBatchSize int

	// DrainPollInterval is the drain's safety-net poll, for the case where a
	// notification was lost (the listener was reconnecting). Defaults to
	// DrainPollIntervalDefault.
	DrainPollInterval time.Duration

	// EffectTimeout is one attempt's deadline. River's job timeout is the
	// claim's lease (twice this). An attempt whose process died is taken up
	// again within seconds by the heartbeat's repair (HeartbeatInterval);
	// River's rescuer, after three times this plus its interval (30 s),
	// stays the net under it (a host that vanished without closing its
	// sockets, a process that hangs). Defaults to
	// workers.EffectTimeoutDefault.
	EffectTimeout time.Duration

	// Effects are the enabled effects; each gets a River queue of its own.
	// Required.
	Effects *effects.Registry

	// FetchCooldown is River's minimum time between fetches of one queue.
	// River's own default (100 ms) caps a queue of 50 workers at 500 jobs/s
	// and adds up to 100 ms to every intent's latency; an agent waiting on an
	// outcome notices both. Defaults to FetchCooldownDefault.
	FetchCooldown time.Duration

	// FetchPollInterval is how often River looks for jobs of a queue that
	// no notification announced. River notifies a queue's producer of new
	// jobs at most once per FetchCooldown, so a job inserted just after a
	// notification, the last of a burst, waits for this poll: River's own
	// default (1 s) showed as one-second tails at the end of bursts.
	// Defaults to FetchPollIntervalDefault: a few cheap queries a second
	// per queue when idle.
	FetchPollInterval time.Duration

	// HeartbeatInterval is how often this process writes its heartbeat and
	// looks for processes that died with jobs running, whose jobs it then
	// makes available again at once: a process is dead once its liveness
	// session is gone and its last heartbeat is two intervals old
	// (docs/design.md, "Crash recovery timing"). Defaults to
	// HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration

	// Logger receives the dispatcher's, the workers' and River's logs.
	// Defaults to a logger that discards.
	Logger *slog.Logger

	// MaxAttempts is the number of attempts per intent. Defaults to
	// workers.MaxAttemptsDefault.
	MaxAttempts int

	// Metrics receives the workers' metrics. Defaults to unregistered ones.
	Metrics *workers.Metrics

	// PollOnly says that the pool's connections are not sessions of their
	// own: the pool goes through a transaction pooler (PgBouncer with
	// pool_mode=transaction), where LISTEN hears nothing and a session
	// advisory lock stays on a server connection other clients then use.
	// River then polls for jobs instead of listening (river.Config's
	// PollOnly, every FetchPollInterval), and what needs a session runs on
	// SessionPool, which New then requires. Defaults to false
	// (docs/operations.md, "Behind PgBouncer").
	PollOnly bool

	// PruneInterval is how often terminal intents past Retention are pruned.
	// Defaults to PruneIntervalDefault.
	PruneInterval time.Duration

	// Retention is how long terminal intents are kept. Defaults to
	// workers.RetentionDefault.
	Retention time.Duration

	// ReconcileInterval is how often River's leader repairs intents whose
	// River job is finished or gone (workers.ReconcileArgs). Defaults to
	// workers.ReconcileIntervalDefault.
	ReconcileInterval time.Duration

	// Schema holds River's and outbox's tables. Defaults to "outbox".
	Schema string

	// SessionPool holds what needs a session of its own: the process's
	// liveness session (a session-level advisory lock held for the
	// process's life) and the drain's LISTEN connection. A direct
	// connection or a session-mode pooler, when the dispatcher's pool is a
	// transaction pooler's (PollOnly); one or two connections. Defaults to
	// the dispatcher's pool.
	SessionPool *pgxpool.Pool

	// TracerProvider, when set, makes River's inserts and jobs spans
	// (rivercontrib/otelriver: river.insert_many, river.work) and each
	// intent's attempt a span under its job's (workers.TracerName),
	// linked to the span that enqueued it. Defaults to nil: no River spans,
	// and attempts take the global provider, a no-op unless traces were
	// configured.
	TracerProvider trace.TracerProvider

	// HeldQueueFunc, when set, says why this dispatcher does not work a
	// River queue for now ("" to work it): a job of a held queue goes back,
	// snoozed, before anything of its intent is read or claimed, for a
	// replica that works it (an MCP upstream whose lock differs from the
	// one the replicas recorded). Defaults to none held.
	HeldQueueFunc func(queue string) string

	// Workers is the number of River workers per effect queue. Defaults to
	// WorkersDefault.
	Workers int
}

// Dispatcher drains intents into River jobs and runs River's workers.
type Dispatcher struct {
	drainer   *drainer
	heartbeat *heartbeat
	logger    *slog.Logger
	pool      *pgxpool.Pool
	river     *river.Client[pgx.Tx]
	stopTO    time.Duration
	worker    *riverworker.IntentWorker

	mu            sync.Mutex
	cancel        context.CancelFunc
	drainDone     chan struct{}
	heartbeatDone chan struct{}
	stopped       bool
}

// WithDefaults returns a copy of c with every zero setting at its default,
// as River's Config.WithDefaults does. A nil c is the zero Config.
func (c *Config) WithDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.ApprovalTTL == 0 {
		out.ApprovalTTL = workers.ApprovalTTLDefault
	}
	if out.DrainBatchSize == 0 {
		out.DrainBatchSize = DrainBatchSizeDefault
	}
	if out.DrainPollInterval == 0 {
		out.DrainPollInterval = DrainPollIntervalDefault
	}
	if out.EffectTimeout == 0 {
		out.EffectTimeout = workers.EffectTimeoutDefault
	}
	if out.FetchCooldown == 0 {
		out.FetchCooldown = FetchCooldownDefault
	}
	if out.FetchPollInterval == 0 {
		out.FetchPollInterval = FetchPollIntervalDefault
	}
	if out.HeartbeatInterval == 0 {
		out.HeartbeatInterval = HeartbeatIntervalDefault
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = workers.MaxAttemptsDefault
	}
	if out.Metrics == nil {
		out.Metrics = workers.NewMetrics(nil)
	}
	if out.PruneInterval == 0 {
		out.PruneInterval = PruneIntervalDefault
	}
	if out.ReconcileInterval == 0 {
		out.ReconcileInterval = workers.ReconcileIntervalDefault
	}
	if out.Retention == 0 {
		out.Retention = workers.RetentionDefault
	}
	if out.Schema == "" {
		out.Schema = migrations.SchemaDefault
	}
	if out.Workers == 0 {
		out.Workers = WorkersDefault
	}
	return &out
}

// validate checks a Config with its defaults.
func (c *Config) validate() error {
	if c.Effects == nil {
		return errors.New("dispatcher: Effects must be set")
	}
	// Named one by one, as River's config errors are: a caller reads which
	// field to fix.
	for _, f := range []struct {
		name     string
		negative bool
	}{
		{"ApprovalTTL", c.ApprovalTTL < 0}, {"DrainBatchSize", c.DrainBatchSize < 0}, {"DrainPollInterval", c.DrainPollInterval < 0},
		{"EffectTimeout", c.EffectTimeout < 0}, {"FetchCooldown", c.FetchCooldown < 0}, {"FetchPollInterval", c.FetchPollInterval < 0},
		{"HeartbeatInterval", c.HeartbeatInterval < 0}, {"MaxAttempts", c.MaxAttempts < 0}, {"PruneInterval", c.PruneInterval < 0},
		{"ReconcileInterval", c.ReconcileInterval < 0}, {"Retention", c.Retention < 0}, {"Workers", c.Workers < 0},
	} {
		if f.negative {
			return fmt.Errorf("dispatcher: Config.%s must be positive", f.name)
		}
	}
	if len(c.Effects.Names()) == 0 {
		return errors.New("dispatcher: no effect is enabled")
	}
	if c.PollOnly && c.SessionPool == nil {
		// On a pooled connection the liveness lock would outlive the
		// process on a server connection, and a dead process's jobs would
		// wait for River's rescuer instead of seconds.
		return errors.New("dispatcher: PollOnly needs SessionPool: the process's liveness lock and LISTEN need a session of their own, which a transaction pooler does not keep")
	}
	return nil
}

// New returns a Dispatcher; Start runs it.
func New(pool *pgxpool.Pool, config *Config) (*Dispatcher, error) {
	c := *config.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}

	// The workers are internal: c, its defaults filled, is the one public
	// home of their settings, and each worker's config is built from it
	// here, as River's NewClient builds its maintenance services' configs
	// from river.Config. Embedding the workers' configs in Config would
	// show users types they cannot name.
	intents, err := riverworker.NewIntentWorker(pool, &riverworker.IntentWorkerConfig{
		EffectTimeout:  c.EffectTimeout,
		Effects:        c.Effects,
		Logger:         c.Logger,
		MaxAttempts:    c.MaxAttempts,
		Metrics:        c.Metrics,
		Schema:         c.Schema,
		TracerProvider: c.TracerProvider,
		HeldQueueFunc:  c.HeldQueueFunc,
	})
	if err != nil {
		return nil, err
	}
	pruner, err := riverworker.NewPruneWorker(pool, &riverworker.PruneWorkerConfig{
		Logger:    c.Logger,
		Retention: c.Retention,
		Schema:    c.Schema,
	})
	if err != nil {
		return nil, err
	}

	reconciler, err := riverworker.NewReconcileWorker(pool, &riverworker.ReconcileWorkerConfig{
		ApprovalTTL: c.ApprovalTTL,
		Effects:     c.Effects,
		Interval:    c.ReconcileInterval,
		Logger:      c.Logger,
		Metrics:     c.Metrics,
		Schema:      c.Schema,
	})
	if err != nil {
		return nil, err
	}

	riverWorkers := river.NewWorkers()
	if err := river.AddWorkerSafely(riverWorkers, intents); err != nil {
		return nil, err
	}
	if !c.DisableBatchFirstAttempts {
		batcher, err := riverworker.NewIntentBatchWorker(pool, intents, c.Workers)
		if err != nil {
			return nil, err
		}
		if err := river.AddWorkerSafely(riverWorkers, batcher); err != nil {
			return nil, err
		}
	}
	if err := river.AddWorkerSafely(riverWorkers, pruner); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(riverWorkers, reconciler); err != nil {
		return nil, err
	}
	if c.ApprovalWebhook != "" {
		webhook, ok := c.Effects.Get("webhook")
		if !ok {
			return nil, errors.New("dispatcher: ApprovalWebhook needs the webhook effect enabled")
		}
		notice, err := riverworker.NewApprovalNoticeWorker(pool, &riverworker.ApprovalNoticeWorkerConfig{
			Endpoint: c.ApprovalWebhook,
			Schema:   c.Schema,
			TTL:      c.ApprovalTTL,
			Webhook:  webhook,
		})
		if err != nil {
			return nil, fmt.Errorf("dispatcher: %w", err)
		}
		if err := river.AddWorkerSafely(riverWorkers, notice); err != nil {
			return nil, err
		}
	}
	queues, err := effectQueues(c.Effects, c.Workers)
	if err != nil {
		return nil, err
	}
	lease := riverworker.Lease(c.EffectTimeout)
	sessionPool := c.SessionPool
	if sessionPool == nil {
		sessionPool = pool
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     c.FetchCooldown,
		FetchPollInterval: c.FetchPollInterval,
		// River cancels an attempt's context at the end of its lease ...
		JobTimeout: lease,
		// ... and rescues it a little later, once the lease has surely
		// expired, so the rescued attempt finds a lost outcome to handle
		// instead of a live lease to wait for.
		RescueStuckJobsAfter: lease + c.EffectTimeout,
		Logger:               c.Logger,
		MaxAttempts:          intents.MaxAttempts(),
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(c.PruneInterval), func() (river.JobArgs, *river.InsertOpts) {
				return workers.PruneArgs{}, &river.InsertOpts{Queue: QueueMaintenance}
			}, &river.PeriodicJobOpts{RunOnStart: true, ID: "outbox_prune"}),
			// Periodic jobs are inserted by River's leader only, so one
			// replica reconciles at a time.
			river.NewPeriodicJob(river.PeriodicInterval(c.ReconcileInterval), func() (river.JobArgs, *river.InsertOpts) {
				return workers.ReconcileArgs{}, &river.InsertOpts{Queue: QueueMaintenance}
			}, &river.PeriodicJobOpts{RunOnStart: true, ID: "outbox_reconcile"}),
		},
		Middleware: riverMiddleware(c.TracerProvider),
		// River's notifier LISTENs on a connection of the pool.
		PollOnly: c.PollOnly,
		Queues:   queues,
		Schema:   c.Schema,
		Workers:  riverWorkers,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating River client: %w", err)
	}

	return &Dispatcher{
		drainer:   newDrainer(pool, sessionPool, client, &c, intents.MaxAttempts()),
		heartbeat: newHeartbeat(pool, sessionPool, &c, client.ID()),
		logger:    c.Logger,
		pool:      pool,
		river:     client,
		stopTO:    c.EffectTimeout,
		worker:    intents,
	}, nil
}

// riverMiddleware is River's OpenTelemetry middleware (otelriver) on
// provider, or none without one: its work for every job would be spent on
// spans nobody records. Its own trace propagation stays off: River's jobs
// are inserted by the drain, not by the agent's request, so the link it
// would make leads to the drain; the attempt's span links to the enqueue
// instead, from the intent's stored traceparent. Its metrics are left
// out: outbox's are Prometheus'.
func riverMiddleware(provider trace.TracerProvider) []rivertype.Middleware {
	if provider == nil {
		return nil
	}
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableWorkSpanJobKindSuffix: true,
		MeterProvider:               metricnoop.NewMeterProvider(),
		TracerProvider:              provider,
	})}
}

// River returns the dispatcher's River client, for operators' tools (River
// UI) and tests.
func (d *Dispatcher) River() *river.Client[pgx.Tx] { return d.river }

// Drain dispatches every committed pending intent that has no job yet and
// returns how many it took. Start runs it continuously; this is for tools and
// tests.
func (d *Dispatcher) Drain(ctx context.Context) (int, error) { return d.drainer.drainAll(ctx) }

// Start starts the workers, River and the drain. It returns once they run.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		return errors.New("dispatcher: already started")
	}
	if d.stopped {
		// The workers' batchers are closed for good; make a new Dispatcher.
		return errors.New("dispatcher: cannot be started again once stopped")
	}
	// Registered before River fetches anything, so that every job this
	// client runs is taken over at once should the process die.
	if err := d.heartbeat.start(ctx); err != nil {
		return err
	}
	d.worker.Start()
	// River treats the end of Start's context as a hard stop that cancels
	// running attempts. Stopping is Stop's job, which is graceful; so River
	// gets a context that never ends.
	if err := d.river.Start(context.WithoutCancel(ctx)); err != nil {
		d.worker.Stop()
		d.heartbeat.stop(context.WithoutCancel(ctx))
		return fmt.Errorf("error starting River: %w", err)
	}
	drainCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	d.drainDone = make(chan struct{})
	go func() {
		defer close(d.drainDone)
		d.drainer.run(drainCtx)
	}()
	d.heartbeatDone = make(chan struct{})
	go func() {
		defer close(d.heartbeatDone)
		d.heartbeat.run(drainCtx)
	}()
	return nil
}

// Stop stops gracefully: the drain first, then River stops fetching and lets
// running attempts finish within the effect timeout (after which their
// contexts are cancelled), and last the workers' batchers write what the
// attempts left. ctx bounds the whole stop.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel == nil {
		return nil
	}
	d.cancel()
	<-d.drainDone
	// The heartbeat stops beating here, but its session (and lock) is kept
	// until River has stopped: the attempts still running are this live
	// process's, not a dead one's.
	<-d.heartbeatDone

	softCtx, cancel := context.WithTimeout(ctx, d.stopTO)
	err := d.river.Stop(softCtx)
	cancel()
	if err != nil {
		d.logger.WarnContext(ctx, "attempts still running after the effect timeout; cancelling them")
		if err := d.river.StopAndCancel(ctx); err != nil {
			return fmt.Errorf("error stopping River: %w", err)
		}
	}
	d.worker.Stop()
	d.heartbeat.stop(ctx)
	d.cancel = nil
	d.stopped = true
	return nil
}

// effectQueues returns River's queues for registry's effects, each with
// workers workers, and the maintenance queue. A queue is an effect's own,
// or shared by effects that say so (effects.Queuer: an MCP upstream's
// tools), never both: an effect's own queue that another effect also named
// would run jobs its workers cannot tell apart. A sized effect
// (effects.QueueSizer: an upstream's processes x max_in_flight) gets that
// many workers, since more would only wait for a slot and time out
// not_sent.
func effectQueues(registry *effects.Registry, workers int) (map[string]river.QueueConfig, error) {
	queues := map[string]river.QueueConfig{QueueMaintenance: {MaxWorkers: 1}}
	type queueUse struct {
		effect string
		shared bool
	}
	uses := map[string]queueUse{QueueMaintenance: {effect: "the maintenance jobs"}}
	for _, name := range registry.Names() {
		e, _ := registry.Get(name)
		queue := effects.QueueOf(e)
		_, shared := e.(effects.Queuer)
		if prev, taken := uses[queue]; taken && !(shared && prev.shared) {
			return nil, fmt.Errorf("dispatcher: River queue %q would run both %s and %s: rename one", queue, prev.effect, name)
		}
		uses[queue] = queueUse{effect: name, shared: shared}
		n := workers
		if sized, ok := e.(effects.QueueSizer); ok && sized.Workers() > 0 {
			n = sized.Workers()
		}
		queues[queue] = river.QueueConfig{MaxWorkers: n}
	}
	return queues, nil
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/console"
	"github.com/outbox-dev/outbox/internal/daemon"
	"github.com/outbox-dev/outbox/internal/effectset"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/metrics"
	"github.com/outbox-dev/outbox/internal/upstream"
	"github.com/outbox-dev/outbox/migrations"
)

var cmdServe = &command{
	name: "serve",
	doc: `Runs the dispatcher (River workers for every enabled effect, one River queue
per effect) and the HTTP server on OUTBOX_HTTP_ADDR:

  GET /healthz   200 {"status":"ok"} while the process is alive
  GET /readyz    200 when the database answers and its migrations are current
  GET /metrics   Prometheus metrics: outbox_*, go_*, process_*
  /riverui/      River UI, for operators: behind basic auth from
                 OUTBOX_UI_USER and OUTBOX_UI_PASSWORD
  /v1/intents    the HTTP API: enqueue, read (?wait=), list, cancel, resolve
  /mcp           MCP over streamable HTTP

The API and /mcp take a bearer token of OUTBOX_API_TOKENS, which picks the
namespace; without tokens serve refuses to listen on any address but
loopback, and answers as namespace default. River UI follows the same rule
without OUTBOX_UI_USER and OUTBOX_UI_PASSWORD.

Refuses to start on a schema with pending migrations unless
OUTBOX_AUTO_MIGRATE=true, and when no effect is enabled (set
OUTBOX_SANDBOX=true for the sandbox's noop effects). Stops gracefully on
SIGINT or SIGTERM, letting running attempts finish within
OUTBOX_EFFECT_TIMEOUT.`,
}

// databaseErrors is outbox_database_errors_total, the tracer of serve's
// pool: one per process, as serve runs once in it.
var databaseErrors = metrics.NewDatabaseErrors()

// gaugeRefreshInterval overrides how often serve reads the database gauges,
// in nanoseconds; 0 keeps the default. Tests shorten it (export_test.go), so
// that a scrape right after a run sees the run.
var gaugeRefreshInterval atomic.Int64

// upstreamAgreeInterval overrides how often serve reads the upstreams'
// recorded locks, for tests; 0 is upstream.AgreeConfig's default.
var upstreamAgreeInterval atomic.Int64

func (a *app) serve(ctx context.Context, args []string) error {
	if _, err := a.parse(cmdServe, newFlagSet(cmdServe), args, 0, 0); err != nil {
		return err
	}
	cfg, err := a.config(ctx)
	if err != nil {
		return err
	}
	if err := cfg.requireDatabaseURL(); err != nil {
		return err
	}
	if err := checkAPIAuth(cfg); err != nil {
		return err
	}
	if err := checkUIAuth(cfg); err != nil {
		return err
	}
	logger := newLogger(cfg, a.stderr)

	// Derived from the caller's ctx, so that cancelling it stops serve as a
	// signal does.
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	tracerProvider, stopTracing, err := a.startTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTracing()

	// Every statement's and acquire's error is classified for
	// outbox_database_errors_total (docs/operations.md, "Running out").
	tracers := append([]pgx.QueryTracer{databaseErrors}, sqlTracer(tracerProvider, cfg)...)
	pool, err := connect(ctx, cfg, daemon.PoolSize(cfg.Workers), tracers...)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The liveness session, two LISTEN connections (the drain's, the
	// waits') and a migration's.
	sessionPool, err := connectSession(ctx, cfg, 4)
	if err != nil {
		return err
	}
	if sessionPool != nil {
		defer sessionPool.Close()
	}
	logger.InfoContext(ctx, "connected to database",
		"database_url", redactDatabaseURL(cfg.DatabaseURL), "schema", cfg.Schema, "poll_only", cfg.PollOnly)
	if err := checkSessions(ctx, pool, sessionPool); err != nil {
		return err
	}
	checkRoleTimeouts(ctx, cfg, pool, logger)

	migrationPool := pool
	if sessionPool != nil {
		migrationPool = sessionPool
	}
	if err := checkMigrations(ctx, cfg, migrationPool, logger); err != nil {
		return err
	}

	set, err := startEffectSet(ctx, cfg, pool, logger, metrics.NewEffects())
	if err != nil {
		return err
	}
	// The upstreams' children and sessions, then the sandbox's stand-ins,
	// end after the dispatcher stopped, its attempts finished (deferred
	// calls run last in, first out).
	defer set.Close()
	set.Upstreams.Start(ctx)
	// Replicas agree on each upstream's lock: this one records its own,
	// and holds an upstream's queue while another replica's is recorded.
	if err := set.Upstreams.Agree(ctx, pool, intentdb.New(cfg.Schema), &upstream.AgreeConfig{
		Interval: time.Duration(upstreamAgreeInterval.Load()),
		ObserveHeldFunc: func(name string, held bool) {
			set.Metrics.UpstreamLockMismatch.WithLabelValues(name).Set(map[bool]float64{false: 0, true: 1}[held])
		},
	}); err != nil {
		return err
	}
	registry := set.Registry
	if len(registry.Names()) == 0 {
		return errors.New("no effect is enabled: configure a provider or set OUTBOX_SANDBOX=true")
	}
	for _, name := range registry.Names() {
		effect, _ := registry.Get(name)
		logger.InfoContext(ctx, "effect enabled", "effect", name, "guarantee", string(effect.Guarantee()))
	}

	if len(cfg.Tokens()) == 0 {
		logger.WarnContext(ctx, "serving without API tokens (OUTBOX_ALLOW_NO_AUTH=true): anything on this machine can use the API and /mcp as operator of namespace default")
	}
	dcfg := daemonConfig(cfg, set, logger)
	dcfg.Dispatcher.SessionPool = sessionPool
	if tracerProvider.Enabled {
		dcfg.TracerProvider = tracerProvider
	}
	d, err := daemon.Start(ctx, pool, dcfg)
	if err != nil {
		return err
	}
	// The serving line names the version, as outbox_build_info and the
	// traces' service.version do: one value to join the three on during a
	// deploy.
	if d.AdminAddr() != "" {
		logger.InfoContext(ctx, "outboxd serving", "addr", d.Addr(), "admin_addr", d.AdminAddr(), "tls", cfg.TLSCertFile != "", "version", version())
	} else {
		logger.InfoContext(ctx, "outboxd serving", "addr", d.Addr(), "tls", cfg.TLSCertFile != "", "version", version())
	}

	var runErr error
	select {
	case <-ctx.Done():
		// A second signal now kills the process the default way.
		stopSignals()
		logger.InfoContext(ctx, "outboxd stopping")
	case err := <-d.ServeErr():
		runErr = fmt.Errorf("error serving HTTP: %w", err)
	}
	if err := d.Stop(context.WithoutCancel(ctx)); err != nil && runErr == nil {
		runErr = err
	}
	if runErr == nil {
		logger.InfoContext(context.WithoutCancel(ctx), "outboxd stopped")
	}
	return runErr
}

// daemonConfig is what serve (and the demo) run, from the configuration
// and the effect set.
func daemonConfig(cfg *Config, set *effectset.Set, logger *slog.Logger) *daemon.Config {
	return &daemon.Config{
		AdminAddr:     cfg.AdminAddr,
		APITokens:     cfg.Tokens(),
		ApprovalRules: cfg.ApprovalRules(),
		Collectors:    append([]prometheus.Collector{databaseErrors}, set.Metrics.Collectors()...),
		Console:       console.Config{UIPassword: cfg.UIPassword, UIUser: cfg.UIUser},
		Dispatcher: dispatcher.Config{
			ApprovalTTL:               cfg.ApprovalTTL,
			ApprovalWebhook:           cfg.ApprovalWebhook,
			DisableBatchFirstAttempts: !cfg.BatchFirstAttempts,
			EffectTimeout:             cfg.EffectTimeout,
			FetchPollInterval:         cfg.FetchPollInterval,
			HeartbeatInterval:         cfg.HeartbeatInterval,
			MaxAttempts:               cfg.MaxAttempts,
			PollOnly:                  cfg.PollOnly,
			ReconcileInterval:         cfg.ReconcileInterval,
			Retention:                 cfg.Retention,
			Workers:                   cfg.Workers,
			HeldQueueFunc:             set.Upstreams.HeldQueue,
		},
		HeldFunc:             set.Upstreams.Held,
		Effects:              set.Registry,
		GaugeRefreshInterval: time.Duration(gaugeRefreshInterval.Load()),
		HTTPAddr:             cfg.HTTPAddr,
		Logger:               logger,
		MaxWaits:             cfg.MaxWaits,
		MCP: mcpserver.Config{
			ApprovalTTL:   cfg.ApprovalTTL,
			AutoKeyWindow: cfg.AutoKeyWindow,
			ModelKeyGuard: keyguard.Mode(cfg.ModelKeyGuard),
			Passthrough:   set.Passthrough(),
			PublicURL:     cfg.PublicURL,
			Retention:     cfg.Retention,
			StateKey:      cfg.StateKeyValue(),
		},
		RateLimit:   cfg.RateLimitValue(),
		Schema:      cfg.Schema,
		TLSCertFile: cfg.TLSCertFile,
		TLSKeyFile:  cfg.TLSKeyFile,
		Version:     version(),
	}
}

// checkMigrations refuses a schema with pending migrations, or applies them
// when cfg.AutoMigrate.
func checkMigrations(ctx context.Context, cfg *Config, pool *pgxpool.Pool, logger *slog.Logger) error {
	migrator, err := migrations.New(pool, &migrations.Config{Schema: cfg.Schema})
	if err != nil {
		return err
	}
	st, err := migrator.Status(ctx)
	if err != nil {
		return err
	}
	if st.UpToDate() {
		return nil
	}
	if st.OutboxCurrent > st.OutboxLatest || st.RiverCurrent > st.RiverLatest {
		// A newer release migrated the schema (docs/operations.md,
		// "Upgrading"): this one does not know whether its migrations are
		// safe for it, and refuses rather than guess.
		return fmt.Errorf("schema %s is newer than this release (river %d, outbox %d; this release knows river %d, outbox %d): run the newer release, or migrate down with it first",
			cfg.Schema, st.RiverCurrent, st.OutboxCurrent, st.RiverLatest, st.OutboxLatest)
	}
	if !cfg.AutoMigrate {
		return fmt.Errorf("schema %s has pending migrations (river %d of %d, outbox %d of %d): run outboxd migrate up, or set OUTBOX_AUTO_MIGRATE=true",
			cfg.Schema, st.RiverCurrent, st.RiverLatest, st.OutboxCurrent, st.OutboxLatest)
	}
	res, err := migrator.Up(ctx)
	if err != nil {
		return err
	}
	for _, m := range res.Applied {
		logger.InfoContext(ctx, "applied migration", "component", m.Component, "version", m.Version, "name", m.Name)
	}
	return nil
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
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

// Timeouts of serve's HTTP server and of its stop.
const (
	httpIdleTimeout       = 2 * time.Minute
	httpReadHeaderTimeout = 10 * time.Second
	httpReadTimeout       = 30 * time.Second
	// httpWriteTimeout leaves room for the API's longest wait (60 s).
	httpWriteTimeout    = 90 * time.Second
	httpShutdownTimeout = 10 * time.Second

	// dispatcherStopGrace is added to the effect timeout to bound the
	// dispatcher's stop: running attempts get the effect timeout, and the
	// workers then write what they left.
	dispatcherStopGrace = 10 * time.Second
)

// poolSize is serve's pool size: room for the workers' writes (batched, so
// fewer than the workers), the drain, River's own connections and the
// listeners.
func poolSize(workers int) int32 {
	return int32(max(20, workers/2+10))
}

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

	pool, err := connect(ctx, cfg, poolSize(cfg.Workers))
	if err != nil {
		return err
	}
	defer pool.Close()
	logger.InfoContext(ctx, "connected to database",
		"database_url", redactDatabaseURL(cfg.DatabaseURL), "schema", cfg.Schema)

	if err := checkMigrations(ctx, cfg, pool, logger); err != nil {
		return err
	}

	registry, stopEffects, err := startEffectRegistry(cfg, pool, logger)
	if err != nil {
		return err
	}
	defer stopEffects() // after the dispatcher stopped: its attempts may be calling them
	if len(registry.Names()) == 0 {
		return errors.New("no effect is enabled: configure a provider or set OUTBOX_SANDBOX=true")
	}
	for _, name := range registry.Names() {
		effect, _ := registry.Get(name)
		logger.InfoContext(ctx, "effect enabled", "effect", name, "guarantee", string(effect.Guarantee()))
	}

	metrics, err := newServeMetrics(pool, cfg.Schema, 0, logger)
	if err != nil {
		return err
	}
	metrics.gauges.Start(ctx)
	defer metrics.gauges.Stop()
	d, err := dispatcher.New(pool, &dispatcher.Config{
		EffectTimeout: cfg.EffectTimeout,
		Effects:       registry,
		Logger:        logger,
		MaxAttempts:   cfg.MaxAttempts,
		Metrics:       metrics.workers,
		Retention:     cfg.Retention,
		Schema:        cfg.Schema,
		Workers:       cfg.Workers,
	})
	if err != nil {
		return err
	}

	client, err := outbox.NewClient(pool, &outbox.Config{
		EnqueueObserverFunc: metrics.enqueues.Observe,
		Effects:             registry,
		Logger:              logger,
		Schema:              cfg.Schema,
	})
	if err != nil {
		return err
	}
	api, err := httpapi.New(pool, client, &httpapi.Config{
		AutoKeyWindow: cfg.AutoKeyWindow,
		Logger:        logger,
		Tokens:        cfg.APITokens,
		Version:       version(),
	})
	if err != nil {
		return err
	}

	ui, err := newRiverUI(d.River(), logger)
	if err != nil {
		return err
	}
	stopUI, err := startRiverUI(ctx, ui)
	if err != nil {
		return err
	}
	defer stopUI()

	// Listen before starting the dispatcher, so that a taken port fails the
	// start before any intent is picked up.
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("error listening on %s: %w", cfg.HTTPAddr, err)
	}
	// River stops abruptly, cancelling running attempts, when the context
	// given to Start ends. A signal must stop it gracefully, through Stop
	// below, so Start gets a context that the signal does not cancel.
	if err := d.Start(context.WithoutCancel(ctx)); err != nil {
		listener.Close() //nolint:errcheck // failing anyway
		return err
	}

	server := &http.Server{
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		Handler:           newHTTPHandler(&httpHandlerConfig{API: api, Metrics: metrics.registry, RiverUI: ui, UIPassword: cfg.UIPassword, UIUser: cfg.UIUser}),
		IdleTimeout:       httpIdleTimeout,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.Serve(listener) }()
	logger.InfoContext(ctx, "outboxd serving", "addr", listener.Addr().String())

	var runErr error
	select {
	case <-ctx.Done():
		// A second signal now kills the process the default way.
		stopSignals()
		logger.InfoContext(ctx, "outboxd stopping")
	case err := <-serveErr:
		runErr = fmt.Errorf("error serving HTTP: %w", err)
	}

	// HTTP first, so that no request starts work the dispatcher would no
	// longer carry out; then the dispatcher, which lets running attempts
	// finish.
	stopCtx := context.WithoutCancel(ctx)
	httpCtx, cancel := context.WithTimeout(stopCtx, httpShutdownTimeout)
	if err := server.Shutdown(httpCtx); err != nil {
		logger.WarnContext(stopCtx, "HTTP requests still running at shutdown; closing them", "error", err)
		server.Close() //nolint:errcheck // closing anyway
	}
	cancel()
	dispatcherCtx, cancel := context.WithTimeout(stopCtx, cfg.EffectTimeout+dispatcherStopGrace)
	defer cancel()
	if err := d.Stop(dispatcherCtx); err != nil && runErr == nil {
		runErr = fmt.Errorf("error stopping the dispatcher: %w", err)
	}
	if runErr == nil {
		logger.InfoContext(stopCtx, "outboxd stopped")
	}
	return runErr
}

// checkMigrations refuses a schema with pending migrations, or applies them
// when cfg.AutoMigrate.
func checkMigrations(ctx context.Context, cfg *Config, pool *pgxpool.Pool, logger *slog.Logger) error {
	migrator, err := migrations.New(pool, cfg.Schema)
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

// Package daemon wires what outboxd serve runs, for serve and for the demo:
// the metrics, the dispatcher (River and the intent workers), the write-side
// client, the HTTP API and /mcp, River UI and the operator console, and
// one HTTP server for all of them, started in that order and stopped in
// reverse.
//
// It takes its settings as a plain Config; reading the environment, checking
// the configuration and choosing the effects belong to package cli.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/console"
	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// Timeouts of the HTTP server and of the stop.
const (
	HTTPIdleTimeout       = 2 * time.Minute
	HTTPReadHeaderTimeout = 10 * time.Second
	HTTPReadTimeout       = 30 * time.Second
	// HTTPWriteTimeout leaves room for the API's longest wait (60 s).
	HTTPWriteTimeout    = 90 * time.Second
	HTTPShutdownTimeout = 10 * time.Second

	// DispatcherStopGrace is added to the effect timeout to bound the
	// dispatcher's stop: running attempts get the effect timeout, and the
	// workers then write what they left.
	DispatcherStopGrace = 10 * time.Second
)

// Config configures Start. The settings of the dispatcher, the API and the
// console are their own Configs, passed on as they are; the daemon fills
// in what it shares among them (Effects, Logger, Schema, TracerProvider,
// Version, the tokens) and what it wires (metrics, callbacks).
type Config struct {
	// AdminAddr, when set, is a second listener for the operators' paths
	// (/healthz, /readyz, /metrics, River UI, the console), which HTTPAddr
	// then does not serve: the public port carries only /v1/ and /mcp.
	AdminAddr string

	// APITokens are the bearer tokens of the API, /mcp and the console,
	// each with its namespace and role. Empty serves namespace default
	// without authentication (the caller checks that this is allowed, and
	// the address loopback). Defaults to none.
	APITokens []access.Token

	// ApprovalRules, when not nil, replace the approval rules stored in the
	// schema at start (empty removes them); nil leaves them as they are.
	ApprovalRules []outbox.ApprovalRule

	// Collectors are more metrics for /metrics, counted outside the
	// daemon (the declared effects' rule errors). Defaults to none.
	Collectors []prometheus.Collector

	// Console configures the operator console: UIPassword and UIUser,
	// which River UI's basic auth takes too. Its ApprovalTTL (the
	// dispatcher's), AuthFailureFunc, Logger, Metrics, RiverUIPath, Schema
	// and Tokens are set by the daemon.
	Console console.Config

	// Dispatcher configures River and the workers: ApprovalTTL,
	// ApprovalWebhook, DisableBatchFirstAttempts, EffectTimeout,
	// HeartbeatInterval, MaxAttempts, ReconcileInterval, Retention,
	// Workers and the like. Its Effects, Logger, Metrics, Schema and
	// TracerProvider are set by the daemon.
	Dispatcher dispatcher.Config

	// Effects are the enabled effects. Required.
	Effects *effects.Registry

	// GaugeRefreshInterval is how often the database gauges are read.
	// Defaults to metrics.RefreshIntervalDefault.
	GaugeRefreshInterval time.Duration

	// HTTPAddr is the address to listen on ("127.0.0.1:0" picks a port).
	// Required.
	HTTPAddr string

	// Logger receives every component's logs. Defaults to a logger that
	// discards.
	Logger *slog.Logger

	// MaxWaits bounds the waits (?wait= and get_intent's wait_seconds) in
	// progress at once, over HTTP and /mcp together, shared fairly by
	// namespace (httpapi.Waits). Defaults to httpapi.MaxWaitsDefault.
	MaxWaits int

	// MCP configures /mcp's servers: AutoKeyWindow, ModelKeyGuard,
	// Passthrough and Tools. The API's key guard, which guards enqueues
	// sent with Idempotency-Key-Source: model as /mcp's tools are, takes
	// the same AutoKeyWindow and ModelKeyGuard. Its Actor, Logger,
	// Namespace, PossibleDuplicateFunc, RateLimitFunc, TracerProvider,
	// Version and WaitFunc are set by the daemon.
	MCP mcpserver.Config

	// RateLimit bounds each token's enqueues, over HTTP and /mcp together.
	// Defaults to no limit.
	RateLimit httpapi.RateLimit

	// Schema holds River's and outbox's tables. Defaults to
	// outbox.SchemaDefault.
	Schema string

	// TLSCertFile and TLSKeyFile, when set, make HTTPAddr serve TLS with
	// this certificate (PEM, with its chain) and key. Both or neither.
	TLSCertFile, TLSKeyFile string

	// TracerProvider, when set, makes spans of the API's requests, MCP's
	// tool calls, River's jobs, the attempts and the provider requests
	// (docs/operations.md, "Traces"). Defaults to nil: serve passes one
	// only when the OTEL_* variables turn traces on.
	TracerProvider trace.TracerProvider

	// Version is reported by the API and MCP. Defaults to
	// mcpserver.VersionDefault.
	Version string

	// HeldFunc, when set, is /readyz's detail: by MCP upstream, why this
	// replica does not work its queue (its lock differs from the one the
	// replicas recorded). The replica stays ready: it serves the rest.
	HeldFunc func() map[string]string
}

// withDefaults returns a copy of c with every zero setting at its default,
// and the shared settings written into the components' Configs.
func (c *Config) withDefaults() *Config {
	out := *c
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Schema == "" {
		out.Schema = outbox.SchemaDefault
	}
	if out.Version == "" {
		out.Version = mcpserver.VersionDefault
	}
	out.Dispatcher.Effects = out.Effects
	out.Dispatcher.Logger = out.Logger
	out.Dispatcher.Schema = out.Schema
	out.Dispatcher.TracerProvider = out.TracerProvider
	// The console shows the time left to approve by the dispatcher's TTL,
	// and serve's metric reports it: the one the reconciler applies.
	out.Dispatcher = *out.Dispatcher.WithDefaults()
	out.MCP.Logger = out.Logger
	out.MCP.TracerProvider = out.TracerProvider
	out.MCP.Version = out.Version
	out.Console.ApprovalTTL = out.Dispatcher.ApprovalTTL
	out.Console.Logger = out.Logger.With(slog.String("component", "console"))
	out.Console.RiverUIPath = riverUIPrefix
	out.Console.Schema = out.Schema
	out.Console.Tokens = out.APITokens
	return &out
}

// validate checks what Start needs before the components check theirs.
func (c *Config) validate() error {
	if c.Effects == nil || c.HTTPAddr == "" {
		return errors.New("daemon: Effects and HTTPAddr must be set")
	}
	return nil
}

// Daemon is a running outboxd: dispatcher, API, River UI and metrics.
type Daemon struct {
	// Client is the write-side client the API and MCP use.
	Client *outbox.Client
	// Dispatcher runs River and drains intents into jobs.
	Dispatcher *dispatcher.Dispatcher

	addr          string
	adminAddr     string
	effectTimeout time.Duration
	logger        *slog.Logger
	metrics       *serveMetrics
	serveErr      chan error
	// stops stop what was started, run last first.
	stops []func(ctx context.Context) error
}

// Start starts everything and serves HTTP until Stop. pool must be sized for
// the workers (see PoolSize). On error, what was started is stopped.
func Start(ctx context.Context, pool *pgxpool.Pool, config *Config) (_ *Daemon, err error) {
	if config == nil {
		return nil, errors.New("daemon: Effects and HTTPAddr must be set")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	c := config.withDefaults()
	d := &Daemon{effectTimeout: c.Dispatcher.EffectTimeout, logger: c.Logger, serveErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			d.stop(context.WithoutCancel(ctx)) //nolint:errcheck // failing anyway
		}
	}()

	if d.metrics, err = newServeMetrics(pool, c.Schema, c.Version, c.GaugeRefreshInterval, c.Logger, c.Collectors...); err != nil {
		return nil, err
	}
	d.metrics.gauges.Start(ctx)
	d.stops = append(d.stops, func(context.Context) error { d.metrics.gauges.Stop(); return nil })

	dispatcherConfig := c.Dispatcher
	dispatcherConfig.Metrics = d.metrics.workers
	if d.Dispatcher, err = dispatcher.New(pool, &dispatcherConfig); err != nil {
		return nil, err
	}
	d.metrics.riverClientID.Store(d.Dispatcher.River().ID())
	d.metrics.approvalTTL.Set(c.Dispatcher.ApprovalTTL.Seconds())
	if d.Client, err = outbox.NewClient(pool, &outbox.Config{
		ApprovalObserverFunc: func(_ string, decision outbox.ApprovalDecision) {
			d.metrics.workers.Approvals.WithLabelValues(string(decision)).Inc()
		},
		EnqueueObserverFunc: d.metrics.enqueues.Observe,
		Effects:             c.Effects,
		Logger:              c.Logger,
		// The waits listen where the drain does.
		PollOnly:    c.Dispatcher.PollOnly,
		Schema:      c.Schema,
		SessionPool: c.Dispatcher.SessionPool,
	}); err != nil {
		return nil, err
	}
	if err := d.applyApprovalRules(ctx, c.ApprovalRules, c.Effects); err != nil {
		return nil, err
	}
	api, err := d.newAPI(pool, c)
	if err != nil {
		return nil, err
	}
	migrator, err := migrations.New(pool, &migrations.Config{Schema: c.Schema})
	if err != nil {
		return nil, err
	}

	consoleConfig := c.Console
	consoleConfig.AuthFailureFunc = d.metrics.authFailures.Inc
	consoleConfig.Metrics = d.metrics.registry
	consoleConfig.TaskIDFunc = mcpserver.NewTaskIDs(pool, c.Schema, c.MCP.StateKey).TaskID
	consoleHandler, err := console.New(pool, d.Client, &consoleConfig)
	if err != nil {
		return nil, err
	}

	ui, err := newRiverUI(d.Dispatcher.River(), c.Logger)
	if err != nil {
		return nil, err
	}
	stopUI, err := startRiverUI(ctx, ui)
	if err != nil {
		return nil, err
	}
	d.stops = append(d.stops, func(context.Context) error { stopUI(); return nil })

	// Listen before starting the dispatcher, so that a taken port or a bad
	// certificate fails the start before any intent is picked up.
	var tlsConfig *tls.Config
	if c.TLSCertFile != "" || c.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("error loading the TLS certificate and key: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", c.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("error listening on %s: %w", c.HTTPAddr, err)
	}
	if tlsConfig != nil {
		listener = tls.NewListener(listener, tlsConfig)
	}
	listeners := []net.Listener{listener}
	var adminListener net.Listener
	if c.AdminAddr != "" {
		if adminListener, err = (&net.ListenConfig{}).Listen(ctx, "tcp", c.AdminAddr); err != nil {
			listener.Close() //nolint:errcheck // failing anyway
			return nil, fmt.Errorf("error listening on %s: %w", c.AdminAddr, err)
		}
		listeners = append(listeners, adminListener)
	}
	closeListeners := func() {
		for _, l := range listeners {
			l.Close() //nolint:errcheck // failing anyway
		}
	}
	// River stops abruptly, cancelling running attempts, when the context
	// given to Start ends. A signal must stop it gracefully, through Stop,
	// so Start gets a context that the caller's cancellation does not end.
	if err := d.Dispatcher.Start(context.WithoutCancel(ctx)); err != nil {
		closeListeners()
		return nil, err
	}
	d.stops = append(d.stops, func(ctx context.Context) error {
		// The dispatcher lets running attempts finish within the effect
		// timeout, then the workers record what they left.
		ctx, cancel := context.WithTimeout(ctx, d.effectTimeout+DispatcherStopGrace)
		defer cancel()
		if err := d.Dispatcher.Stop(ctx); err != nil {
			return fmt.Errorf("error stopping the dispatcher: %w", err)
		}
		return nil
	})

	handlerConfig := &httpHandlerConfig{
		API: api, AuthFailureFunc: d.metrics.authFailures.Inc, Console: consoleHandler, Logger: c.Logger,
		Metrics: d.metrics.registry, Ready: newReadyz(migrator, c.HeldFunc, c.Logger), RiverUI: ui,
		UIPassword: c.Console.UIPassword, UIUser: c.Console.UIUser,
		// One budget of wrong credentials per address, across both
		// listeners.
		FailureLimiter: access.NewFailureLimiter(0, 0),
	}
	publicParts := partsAll
	if adminListener != nil {
		publicParts = partsPublic
	}
	d.serve(c.Logger, listener, newHTTPHandler(handlerConfig, publicParts))
	if adminListener != nil {
		d.serve(c.Logger, adminListener, newHTTPHandler(handlerConfig, partsAdmin))
		d.adminAddr = adminListener.Addr().String()
	}
	d.addr = listener.Addr().String()
	return d, nil
}

// serve serves handler on listener until Stop. HTTP stops before what was
// started earlier, so that no request starts work the dispatcher would no
// longer carry out.
func (d *Daemon) serve(logger *slog.Logger, listener net.Listener, handler http.Handler) {
	server := &http.Server{
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		Handler:           handler,
		IdleTimeout:       HTTPIdleTimeout,
		ReadHeaderTimeout: HTTPReadHeaderTimeout,
		ReadTimeout:       HTTPReadTimeout,
		WriteTimeout:      HTTPWriteTimeout,
	}
	go func() {
		err := server.Serve(listener)
		select {
		case d.serveErr <- err:
		default: // the other listener's error is reported already
		}
	}()
	d.stops = append(d.stops, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, HTTPShutdownTimeout)
		defer cancel()
		if err := server.Shutdown(ctx); err != nil {
			d.logger.WarnContext(ctx, "HTTP requests still running at shutdown; closing them", "error", err)
			server.Close() //nolint:errcheck // closing anyway
		}
		return nil
	})
}

// Addr is the address the HTTP server listens on.
func (d *Daemon) Addr() string { return d.addr }

// AdminAddr is the admin listener's address, or "" without one.
func (d *Daemon) AdminAddr() string { return d.adminAddr }

// ServeErr receives the HTTP server's error if it stops serving by itself.
func (d *Daemon) ServeErr() <-chan error { return d.serveErr }

// RefreshGauges reads the database gauges now, so that /metrics shows what
// just happened.
func (d *Daemon) RefreshGauges(ctx context.Context) error { return d.metrics.gauges.Refresh(ctx) }

// Stop stops HTTP first, then the dispatcher (letting running attempts
// finish within the effect timeout), then River UI and the gauges. It
// returns the first error.
func (d *Daemon) Stop(ctx context.Context) error { return d.stop(ctx) }

func (d *Daemon) stop(ctx context.Context) error {
	var first error
	for _, stop := range slices.Backward(d.stops) {
		if err := stop(ctx); err != nil && first == nil {
			first = err
		}
	}
	d.stops = nil
	return first
}

// PoolSize is the pool size a daemon with workers workers per effect needs:
// room for the workers' writes (batched, so fewer than the workers), the
// drain, River's own connections and the listeners.
func PoolSize(workers int) int32 {
	return int32(max(20, workers/2+10))
}

// applyApprovalRules stores rules as the ones in force (unless nil), and
// says which rules are in force: a change at warn, since replicas should
// share OUTBOX_APPROVAL and the last one started wins.
func (d *Daemon) applyApprovalRules(ctx context.Context, rules []outbox.ApprovalRule, registry *effects.Registry) error {
	before, err := d.Client.ApprovalRules(ctx)
	if err != nil {
		return err
	}
	after := before
	if rules != nil {
		after = make([]string, len(rules))
		for i, r := range rules {
			after[i] = r.String()
			if _, ok := registry.Get(r.Effect); !ok {
				d.logger.WarnContext(ctx, "approval rule names an effect this server does not run", "rule", after[i])
			}
		}
		if !slices.Equal(before, after) {
			if err := d.Client.SetApprovalRules(ctx, rules); err != nil {
				return err
			}
			if len(before) > 0 {
				d.logger.WarnContext(ctx, "approval rules changed", "from", strings.Join(before, ","), "to", strings.Join(after, ","))
			}
		}
	}
	if len(after) > 0 {
		d.logger.InfoContext(ctx, "approval rules in force", "rules", strings.Join(after, ","))
	}
	return nil
}

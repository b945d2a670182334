package demo

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/daemon"
	"github.com/outbox-dev/outbox/internal/effectset"
	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// EnvConfig is what StartEnv takes from outboxd demo: its settings, and the
// parts of outboxd serve it runs as they are, given as functions so that the
// demo's dispatcher and server are serve's.
type EnvConfig struct {
	// ConnectFunc connects to databaseURL, with outboxd's pool settings,
	// for outbox's tables in schema. Required.
	ConnectFunc func(ctx context.Context, databaseURL, schema string) (*pgxpool.Pool, error)

	// DaemonConfigFunc is serve's configuration of outboxd for set, on the
	// database and schema ConnectFunc was last given. Required.
	DaemonConfigFunc func(set *effectset.Set) *daemon.Config

	// DatabaseURL is the user's database, where the demo works in Schema;
	// empty starts a throwaway PostgreSQL cluster instead. Defaults to
	// empty.
	DatabaseURL string

	// DatabaseURLRedacted is DatabaseURL without its password, as the demo
	// prints it. Defaults to empty.
	DatabaseURLRedacted string

	// EffectSetFunc builds the effects outboxd runs, pointed at sb's
	// stand-ins; the environment closes the set when it stops. Required.
	EffectSetFunc func(ctx context.Context, pool *pgxpool.Pool, sb *sandbox.Sandbox) (*effectset.Set, error)

	// Logger receives the logs of what the demo starts. Defaults to a
	// logger that discards.
	Logger *slog.Logger

	// SandboxFunc starts the sandbox's stand-ins. Required.
	SandboxFunc func() (*sandbox.Sandbox, error)

	// StripeKey is the API key of the sandbox's Stripe-like API, for the
	// story's calls without outbox. Required.
	StripeKey string

	// Tokens are outboxd's API tokens, of which the agent sends one
	// (AgentToken). Defaults to none: the API answers without one.
	Tokens []access.Token

	// Upstream pins and binds the demo's MCP server as outboxd effects pin
	// would. Defaults to the zero UpstreamConfig.
	Upstream UpstreamConfig
}

// Environment is what the demo runs: a database, the sandbox's providers,
// the demo's MCP server, and outboxd's dispatcher and HTTP server.
type Environment struct {
	// Env is what the story is told against.
	Env

	stops []func()
}

// Stop stops what was started, last first.
func (e *Environment) Stop() {
	for _, stop := range slices.Backward(e.stops) {
		stop()
	}
}

// StartEnv starts everything the story needs and says on out what it
// started. It returns the environment also on error, for stopping what did
// start.
func StartEnv(ctx context.Context, config *EnvConfig, out *Output) (*Environment, error) {
	logger := config.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	env := &Environment{Env: Env{Namespace: outbox.NamespaceDefault, StripeKey: config.StripeKey}}
	databaseURL, schema := config.DatabaseURL, Schema
	dbLine := "DATABASE_URL " + config.DatabaseURLRedacted + ", schema " + Schema
	if databaseURL == "" {
		done := out.Progress("starting a throwaway PostgreSQL (initdb, pg_ctl)")
		cluster, err := pgcluster.Start(ctx, &pgcluster.Config{Logger: logger})
		done()
		if err != nil {
			return env, fmt.Errorf("error starting a throwaway PostgreSQL (set DATABASE_URL to use a database of yours): %w", err)
		}
		env.stops = append(env.stops, func() { _ = cluster.Stop(context.Background()) })
		// The cluster is the demo's alone: outbox's own schema.
		databaseURL, schema = cluster.URL(), outbox.SchemaDefault
		dbLine = "a throwaway PostgreSQL on a Unix socket in " + cluster.SocketDir() + " (no TCP listener), removed on exit"
	}

	pool, err := config.ConnectFunc(ctx, databaseURL, schema)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, pool.Close)
	done := out.Progress("migrating schema " + schema)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err == nil {
		_, err = migrator.Up(ctx)
	}
	done()
	if err != nil {
		return env, err
	}

	sb, err := config.SandboxFunc()
	if err != nil {
		return env, err
	}
	env.Sandbox = sb
	env.stops = append(env.stops, sb.Close)
	set, err := config.EffectSetFunc(ctx, pool, sb)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, set.Close)
	registry := set.Registry

	// An MCP server behind outbox (part 5), in this process on loopback.
	upstreamConfig := config.Upstream
	if upstreamConfig.ObserveCallFunc == nil && set.Metrics != nil {
		// Counted as serve counts its upstreams' calls.
		upstreamConfig.ObserveCallFunc = func(u, t, o string) { set.Metrics.UpstreamCalls.WithLabelValues(u, t, o).Inc() }
	}
	up, err := startUpstreamServer(ctx, &upstreamConfig, logger)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, up.stop)
	if err := up.register(registry); err != nil {
		return env, err
	}
	env.Upstream = &Upstream{URL: up.url, Tool: "create_note", Mirrored: "demo_create_note", EffectsFunc: up.notes}

	dcfg := config.DaemonConfigFunc(set)
	for _, p := range up.catalog.Passthrough {
		dcfg.MCP.Passthrough = append(dcfg.MCP.Passthrough, p)
	}
	dcfg.Dispatcher.EffectTimeout = ClientTimeout
	// Gauges refreshed every second: someone who opens /metrics after the
	// story should see it.
	dcfg.GaugeRefreshInterval = time.Second
	dcfg.Dispatcher.Workers = Workers
	dcfg.ApprovalRules, err = outbox.ParseApprovalRules(ApprovalRule)
	if err != nil {
		return env, err
	}
	d, err := daemon.Start(ctx, pool, dcfg)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, func() { _ = d.Stop(context.Background()) })
	env.Client, env.Daemon = d.Client, d
	env.Token, env.Namespace = AgentToken(config.Tokens)
	env.BaseURL = "http://" + d.Addr()

	tw := out.Table()
	fmt.Fprintf(tw, "  database\t%s\n", dbLine)
	fmt.Fprintf(tw, "  providers\tthe sandbox's stand-ins on loopback: Stripe-like %s, SMTP sink %s, Zendesk-like %s\n",
		sb.Stripe.URL(), sb.SMTP.Addr(), sb.Zendesk.URL())
	fmt.Fprintf(tw, "  outboxd\tschema %s migrated, dispatcher running (OUTBOX_EFFECT_TIMEOUT=%s), HTTP on %s\n",
		schema, ClientTimeout, env.BaseURL)
	if env.Token == "" {
		fmt.Fprintf(tw, "  warning\tno API tokens: the API, /mcp and River UI answer anything on this machine (OUTBOX_ALLOW_NO_AUTH)\n")
	}
	tw.Flush() //nolint:errcheck // the writer's errors are its own
	return env, nil
}

// AgentToken picks the bearer token the demo's agent sends when tokens are
// configured: namespace default's, else the first namespace's; "" and
// namespace default when no token can enqueue.
func AgentToken(tokens []access.Token) (token, namespace string) {
	var first *access.Token
	for i, t := range tokens {
		// The story enqueues: a reader's token cannot; a token given by
		// its hash cannot be sent.
		if t.Secret() == "" || !t.Role.Allows(access.RoleAgent) {
			continue
		}
		if t.Namespace == outbox.NamespaceDefault {
			return t.Secret(), t.Namespace
		}
		if first == nil {
			first = &tokens[i]
		}
	}
	if first == nil {
		return "", outbox.NamespaceDefault
	}
	return first.Secret(), first.Namespace
}

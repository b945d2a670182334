package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/daemon"
	"github.com/outbox-dev/outbox/internal/demo"
	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"

	"github.com/outbox-dev/outbox/internal/effectset"
)

var cmdDemo = &command{
	name: "demo",
	args: "[--exit]",
	doc: `Shows, with real calls, the failure outbox exists for and how it ends with
and without outbox: an agent charges a card, the provider is slow, the client
times out, the framework retries, the model calls the tool again. Then each
guarantee at work when an outcome is lost: an email whose server crashed
mid-send ends unknown, a ticket is reconciled by look-up. A summary table
counts the calls made against the effects performed.

The demo needs nothing set. Without DATABASE_URL it starts a throwaway
PostgreSQL cluster from the binaries installed on the machine (initdb and
pg_ctl, on PATH or under /usr/lib/postgresql/*/bin) in a temporary directory,
and removes it on exit. With DATABASE_URL it works in schema outbox_demo, never
in OUTBOX_SCHEMA, so that no serve picks up its intents (DROP SCHEMA
outbox_demo CASCADE removes it). The providers are the sandbox's stand-ins on
loopback ports; nothing leaves the machine.

Once the story is told, the demo keeps serving the HTTP API, River UI, the
operator console (/console/) and /metrics on OUTBOX_HTTP_ADDR, or a free
loopback port when that is not set, until Ctrl-C. With --exit it stops at once, with exit status 0 only if every
check of the story held. Logs are off unless OUTBOX_LOG_LEVEL is set; then
they go to stderr.`,
}

func (a *app) demo(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdDemo)
	exit := fs.Bool("exit", false, "stop once the story is told; exit status 0 only if every check held")
	if _, err := a.parse(cmdDemo, fs, args, 0, 0); err != nil {
		return err
	}
	cfg, err := a.config(ctx)
	if err != nil {
		return err
	}
	env := nonEmptyLookuper{a.lookuper}
	if _, set := env.Lookup("OUTBOX_HTTP_ADDR"); !set {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	// The demo is for this machine: without tokens it serves loopback as
	// serve would with OUTBOX_ALLOW_NO_AUTH=true, and says so.
	if len(cfg.Tokens()) == 0 {
		cfg.AllowNoAuth = true
	}
	if err := checkAPIAuth(cfg); err != nil {
		return err
	}
	if err := checkUIAuth(cfg); err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if _, set := env.Lookup("OUTBOX_LOG_LEVEL"); set {
		logger = newLogger(cfg, a.stderr)
	}

	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	out := demo.NewOutput(a.stdout)
	out.Printf("outbox demo: one charge, asked for by an agent that repeats itself, with and without outbox\n\n")
	de, err := startDemoEnv(ctx, cfg, logger, out)
	defer de.stop()
	if err != nil {
		return err
	}

	s := demo.NewStory(&de.Env, out)
	if err := s.Tell(ctx); err != nil {
		if ctx.Err() != nil {
			out.Printf("\ninterrupted\n")
			return &exitError{code: ExitFailure}
		}
		return err
	}
	failed := s.PrintChecks()
	_ = de.Daemon.RefreshGauges(ctx) // refreshed every second anyway

	base := de.BaseURL
	out.Printf("\n")
	if *exit {
		out.Printf("What you would look at next (the demo stops now: --exit):\n")
	} else {
		out.Printf("outboxd keeps serving until Ctrl-C:\n")
	}
	out.Printf("  River UI  %s/riverui/\n", base)
	// The console opens without signing in when the demo runs without
	// tokens (loopback, as River UI); with tokens, an operator's or a
	// reader's signs in.
	out.Printf("  console   %s/console/\n", base)
	out.Printf("  metrics   %s/metrics\n", base)
	out.Printf("  API       %s/v1/intents\n", base)
	if key := s.UnknownEmailKey(); key != "" {
		out.Printf("  Resolve the unknown email once you have checked the mailbox:\n")
		out.Printf("    %s\n", resolveCommand(base, key, de.Token != ""))
	}
	if !*exit {
		<-ctx.Done()
		out.Printf("\nstopping\n")
	}
	if failed > 0 {
		return &exitError{code: ExitFailure}
	}
	return nil
}

// resolveCommand is the curl command the demo prints for resolving the
// email it left unknown. The Content-Type header is not optional: curl -d
// sends application/x-www-form-urlencoded, which the API refuses (415
// unsupported_media_type). TestDemo sends what this prints.
func resolveCommand(baseURL, key string, auth bool) string {
	authHeader := ""
	if auth {
		authHeader = `-H "Authorization: Bearer $TOKEN" `
	}
	return fmt.Sprintf(`curl -X POST %s-H 'Content-Type: application/json' %s/v1/intents/%s/resolve -d '{"outcome": "succeeded", "note": "in the mailbox"}'`,
		authHeader, baseURL, url.PathEscape(key))
}

// demoEnv is what the demo runs: a database, the sandbox's providers, and
// outboxd's dispatcher and HTTP server.
type demoEnv struct {
	demo.Env

	stops []func()
}

// stop stops what was started, last first.
func (e *demoEnv) stop() {
	for _, stop := range slices.Backward(e.stops) {
		stop()
	}
}

// startDemoEnv starts everything the story needs and says what it started.
// It returns the environment also on error, for stopping what did start.
func startDemoEnv(ctx context.Context, cfg *Config, logger *slog.Logger, out *demo.Output) (*demoEnv, error) {
	env := &demoEnv{Env: demo.Env{Namespace: outbox.NamespaceDefault, StripeKey: effectset.SandboxStripeKey}}
	cfg.Schema = demo.Schema
	dbLine := "DATABASE_URL " + redactDatabaseURL(cfg.DatabaseURL) + ", schema " + demo.Schema
	if cfg.DatabaseURL == "" {
		done := out.Progress("starting a throwaway PostgreSQL (initdb, pg_ctl)")
		cluster, err := pgcluster.Start(ctx, &pgcluster.Config{Logger: logger})
		done()
		if err != nil {
			return env, fmt.Errorf("error starting a throwaway PostgreSQL (set DATABASE_URL to use a database of yours): %w", err)
		}
		env.stops = append(env.stops, func() { _ = cluster.Stop(context.Background()) })
		if err := cfg.setDatabaseURL(cluster.URL()); err != nil {
			return env, err
		}
		cfg.Schema = outbox.SchemaDefault
		dbLine = "a throwaway PostgreSQL on a Unix socket in " + cluster.SocketDir() + " (no TCP listener), removed on exit"
	}

	pool, err := connect(ctx, cfg, 20)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, pool.Close)
	done := out.Progress("migrating schema " + cfg.Schema)
	migrator, err := migrations.New(pool, cfg.Schema)
	if err == nil {
		_, err = migrator.Up(ctx)
	}
	done()
	if err != nil {
		return env, err
	}

	sb, err := effectset.StartSandbox(logger)
	if err != nil {
		return env, err
	}
	env.Sandbox = sb
	env.stops = append(env.stops, sb.Close)
	// The provider effects only, pointed at the stand-ins: the demo has no
	// use for the noop effects.
	ecfg := effectSetConfig(cfg, pool, logger)
	ecfg.Sandbox = false
	ecfg.Providers = effectset.SandboxProviders(sb)
	// A declared effect (OUTBOX_EFFECTS_FILE) goes to loopback hosts only:
	// the demo never calls a real provider.
	ecfg.LoopbackOnly = true
	set, err := buildEffectSet(ctx, ecfg, nil)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, set.Close)
	registry := set.Registry

	// An MCP server behind outbox (part 5), in this process on loopback.
	up, err := startDemoUpstream(ctx, logger, set.Metrics)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, up.stop)
	if err := up.register(registry); err != nil {
		return env, err
	}
	env.Upstream = &demo.Upstream{URL: up.url, Tool: "create_note", Mirrored: "demo_create_note", Effects: up.notes}

	// Gauges refreshed every second: someone who opens /metrics after the
	// story should see it.
	dcfg := daemonConfig(cfg, set, logger)
	for _, p := range up.catalog.Passthrough {
		dcfg.MCP.Passthrough = append(dcfg.MCP.Passthrough, p)
	}
	dcfg.Dispatcher.EffectTimeout = demo.ClientTimeout
	dcfg.GaugeRefreshInterval = time.Second
	dcfg.Dispatcher.Workers = demo.Workers
	dcfg.ApprovalRules, err = outbox.ParseApprovalRules(demo.ApprovalRule)
	if err != nil {
		return env, err
	}
	d, err := daemon.Start(ctx, pool, dcfg)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, func() { _ = d.Stop(context.Background()) })
	env.Client, env.Daemon = d.Client, d
	env.Token, env.Namespace = demoToken(cfg.Tokens())
	env.BaseURL = "http://" + d.Addr()

	tw := out.Table()
	fmt.Fprintf(tw, "  database\t%s\n", dbLine)
	fmt.Fprintf(tw, "  providers\tthe sandbox's stand-ins on loopback: Stripe-like %s, SMTP sink %s, Zendesk-like %s\n",
		sb.Stripe.URL(), sb.SMTP.Addr(), sb.Zendesk.URL())
	fmt.Fprintf(tw, "  outboxd\tschema %s migrated, dispatcher running (OUTBOX_EFFECT_TIMEOUT=%s), HTTP on %s\n",
		cfg.Schema, demo.ClientTimeout, env.BaseURL)
	if env.Token == "" {
		fmt.Fprintf(tw, "  warning\tno API tokens: the API, /mcp and River UI answer anything on this machine (OUTBOX_ALLOW_NO_AUTH)\n")
	}
	tw.Flush() //nolint:errcheck // the writer's errors are its own
	return env, nil
}

// demoToken picks the bearer token the demo's agent sends when tokens are
// configured: namespace default's, else the first namespace's.
func demoToken(tokens []access.Token) (token, namespace string) {
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

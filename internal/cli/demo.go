package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/daemon"
	"github.com/outbox-dev/outbox/internal/demo"
	"github.com/outbox-dev/outbox/internal/effectset"
	"github.com/outbox-dev/outbox/internal/sandbox"
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
	de, err := demo.StartEnv(ctx, demoEnvConfig(cfg, logger), out)
	defer de.Stop()
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

// demoEnvConfig is what the demo's environment takes from outboxd's
// settings: serve's pool, effect set and daemon, on the database and schema
// the demo chooses (demo.StartEnv).
func demoEnvConfig(cfg *Config, logger *slog.Logger) *demo.EnvConfig {
	return &demo.EnvConfig{
		ConnectFunc: func(ctx context.Context, databaseURL, schema string) (*pgxpool.Pool, error) {
			if err := cfg.setDatabaseURL(databaseURL); err != nil {
				return nil, err
			}
			cfg.Schema = schema
			return connect(ctx, cfg, 20)
		},
		DaemonConfigFunc:    func(set *effectset.Set) *daemon.Config { return daemonConfig(cfg, set, logger) },
		DatabaseURL:         cfg.DatabaseURL,
		DatabaseURLRedacted: redactDatabaseURL(cfg.DatabaseURL),
		EffectSetFunc: func(ctx context.Context, pool *pgxpool.Pool, sb *sandbox.Sandbox) (*effectset.Set, error) {
			// The provider effects only, pointed at the stand-ins: the
			// demo has no use for the noop effects.
			ecfg := effectSetConfig(cfg, pool, logger)
			ecfg.Sandbox = false
			ecfg.Providers = effectset.SandboxProviders(sb)
			// A declared effect (OUTBOX_EFFECTS_FILE) goes to loopback
			// hosts only: the demo never calls a real provider.
			ecfg.LoopbackOnly = true
			return buildEffectSet(ctx, ecfg, nil)
		},
		Logger:      logger,
		SandboxFunc: func() (*sandbox.Sandbox, error) { return effectset.StartSandbox(logger) },
		StripeKey:   effectset.SandboxStripeKey,
		Tokens:      cfg.Tokens(),
		Upstream: demo.UpstreamConfig{
			Taken:   effectset.TakenNames(),
			Version: version(),
		},
	}
}

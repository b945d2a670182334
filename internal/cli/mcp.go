package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/outbox"
)

var cmdMCP = &command{
	name: "mcp",
	doc: `Serves MCP (the Model Context Protocol) on stdin and stdout, for an agent
that starts outboxd as its tool server. Every call acts in OUTBOX_NAMESPACE.

Tools:
  charge_card, send_email, create_ticket, call_webhook
      record an intent of the effect charge, email, ticket or webhook; each
      takes the effect's arguments and an optional idempotency_key, and
      answers with the intent and "duplicate"
  get_intent    read an intent, optionally waiting (wait_seconds, at most 60)
                until it is terminal
  list_intents  list intents, newest first

A call without idempotency_key gets an automatic key over the tool and its
arguments: identical calls within OUTBOX_AUTO_KEY_WINDOW of the first are one
action (key_source "auto"). A call for an effect that is not enabled answers
unknown_effect. Tool errors are results with isError set and the error's code.

The tools only record and read intents: outboxd serve, on the same database,
carries them out. Logs go to stderr; stdout carries only MCP.`,
}

func (a *app) mcp(ctx context.Context, args []string) error {
	if _, err := a.parse(cmdMCP, newFlagSet(cmdMCP), args, 0, 0); err != nil {
		return err
	}
	cfg, err := a.config(ctx)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, a.stderr)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	tracerProvider, stopTracing, err := a.startTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTracing()

	pool, err := connect(ctx, cfg, 0, sqlTracer(tracerProvider, cfg)...)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkMigrations(ctx, cfg, pool, logger); err != nil {
		return err
	}
	// The registry as serve would enable it, possibly empty: a tool for an
	// effect that is not enabled then answers unknown_effect, rather than
	// recording an intent nobody will carry out.
	set, err := newEffectSet(ctx, cfg, pool, logger)
	if err != nil {
		return err
	}
	// Pass-through calls reach the upstreams from here; recorded ones
	// only from serve's workers.
	defer set.Close()
	// Listings are compared with the lock here as in serve: a tool that
	// drifted from its pin is withdrawn, not listed, and refuses calls.
	set.Upstreams.Start(ctx)
	registry := set.Registry
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: registry, Logger: logger, Schema: cfg.Schema})
	if err != nil {
		return err
	}
	server, err := mcpserver.New(pool, client, &mcpserver.Config{
		ApprovalTTL:   cfg.ApprovalTTL,
		AutoKeyWindow: cfg.AutoKeyWindow,
		Logger:        logger,
		ModelKeyGuard: keyguard.Mode(cfg.ModelKeyGuard),
		Namespace:     cfg.Namespace,
		Passthrough:   set.Passthrough(),
		PublicURL:     cfg.PublicURL,
		Retention:     cfg.Retention,
		StateKey:      cfg.StateKeyValue(),
		Version:       version(),
	})
	if err != nil {
		return err
	}

	// Listens for task status notifications are answered by outbox, the
	// SDK knowing nothing of tasks.
	transport := mcpserver.ListenTransport(server, &mcp.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopWriteCloser{a.stdout}})
	session, err := server.Connect(ctx, transport, nil)
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "outboxd mcp serving on stdio", "namespace", cfg.Namespace, "effects", registry.Names())
	ended := make(chan error, 1)
	go func() { ended <- session.Wait() }()
	select {
	case err = <-ended:
		// The client closed stdin: the normal end.
	case <-ctx.Done():
		_ = session.Close() // stopping anyway: its error says nothing more
		if endErr := <-ended; endErr != nil {
			// The end Close caused, not the client's.
			logger.DebugContext(context.WithoutCancel(ctx), "mcp session ended by the stop", "error", endErr)
		}
		err = nil
	}
	logger.InfoContext(context.WithoutCancel(ctx), "outboxd mcp stopped")
	return err
}

// nopWriteCloser is stdout for the MCP transport, which closes what it is
// given: outboxd's stdout is not its to close.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

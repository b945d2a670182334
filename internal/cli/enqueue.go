package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/origin"
	"github.com/outbox-dev/outbox/outbox"
)

var cmdEnqueue = &command{
	name: "enqueue",
	args: "--key KEY --effect EFFECT --args JSON|@FILE|- [--requested-by WHO] [--require-approval] [--namespace NS]",
	doc: `Records an intent, in its own transaction, and prints it as JSON with
"duplicate": false, or, when the key is already recorded for the same action,
the first intent with "duplicate": true. A key first used for another action
fails with idempotency_key_reused.

Arguments are checked against the effects that serve would enable from the
same environment (OUTBOX_SANDBOX=true: noop, noop_reconcilable,
noop_at_most_once). With no effect enabled, any valid effect name is accepted
and the arguments are only checked to be a JSON object; the dispatcher then
validates them when it runs the intent.

--require-approval records the intent as awaiting_approval: nothing runs
until an operator approves it (intents approve). OUTBOX_APPROVAL's rules apply
whether or not it is given.`,
}

func (a *app) enqueue(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdEnqueue)
	key := fs.String("key", "", "the idempotency `KEY` naming the action (required)")
	effect := fs.String("effect", "", "the `EFFECT` to carry out, by name (required)")
	argsFlag := fs.String("args", "", "the effect's arguments: a `JSON` object, @FILE to read it from a file, or - for stdin (required)")
	requestedBy := fs.String("requested-by", "", "records `WHO` asked (an agent, a user)")
	requireApproval := fs.Bool("require-approval", false, "wait for an operator's approval before running")
	namespace := fs.String("namespace", "", "the `NAMESPACE` (default: OUTBOX_NAMESPACE)")
	if _, err := a.parse(cmdEnqueue, fs, args, 0, 0); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"key", "effect", "args"} {
		if !set[name] {
			return &usageError{cmd: cmdEnqueue.name, msg: "--" + name + " is required"}
		}
	}
	effectArgs, err := a.readArgs(*argsFlag)
	if err != nil {
		return err
	}

	cfg, err := a.config(ctx)
	if err != nil {
		return err
	}
	if *namespace == "" {
		*namespace = cfg.Namespace
	}
	pool, err := connect(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := newLogger(cfg, a.stderr)
	effectSet, err := newEffectSet(ctx, cfg, pool, logger)
	if err != nil {
		return err
	}
	defer effectSet.Close()
	registry := effectSet.Registry
	if len(registry.Names()) == 0 {
		// A nil registry, not an empty one: an empty one would refuse
		// every effect.
		registry = nil
	}
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: registry, Logger: logger, Schema: cfg.Schema})
	if err != nil {
		return err
	}

	res, err := dbutil.WithTxV(ctx, pool, func(tx pgx.Tx) (*outbox.EnqueueResult, error) {
		ctx := origin.With(ctx, origin.Origin{EnqueuedBy: access.CLIActor()})
		return client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{
			Args:        json.RawMessage(effectArgs),
			Effect:      *effect,
			Key:         *key,
			Namespace:   *namespace,
			RequestedBy: *requestedBy,

			RequireApproval: *requireApproval,
		})
	})
	if err != nil {
		return err
	}
	if err := writeJSON(a.stdout, enqueued{Intent: res.Intent, Duplicate: res.Duplicate}); err != nil {
		return err
	}
	if res.Duplicate {
		fmt.Fprintf(a.stderr, "duplicate: intent %s already recorded (state %s)\n", res.Intent.Key, res.Intent.State)
	} else {
		fmt.Fprintf(a.stderr, "created intent %s\n", res.Intent.Key)
	}
	return nil
}

// enqueued is an enqueue's answer as JSON: the intent and "duplicate".
type enqueued struct {
	*outbox.Intent
	Duplicate bool `json:"duplicate"`
}

// readArgs reads --args: the JSON itself, @FILE, or - for stdin.
func (a *app) readArgs(value string) ([]byte, error) {
	switch {
	case value == "-":
		b, err := io.ReadAll(a.stdin)
		if err != nil {
			return nil, fmt.Errorf("error reading --args from stdin: %w", err)
		}
		return b, nil
	case strings.HasPrefix(value, "@"):
		b, err := os.ReadFile(value[1:])
		if err != nil {
			return nil, fmt.Errorf("error reading --args: %w", err)
		}
		return b, nil
	}
	return []byte(value), nil
}

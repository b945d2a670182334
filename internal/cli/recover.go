package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/intentdb"
)

// cmdRecover is named after PostgreSQL's recovery (recovery_target_time),
// which the operator has just run; its flag names that point rather than a
// "since": every intent not yet ended is marked, whatever its age, and the
// time only checks that the database is the restore the operator thinks.
var cmdRecover = &command{
	name: "recover",
	args: "--restore-point TIME [--json]",
	doc: `Makes a database restored from a backup safe to serve again. Run it once after
the restore, before any serve starts (it refuses while one runs on the
database). The restored database has forgotten what happened after the
restore point; the providers have not. So every intent that is pending,
running or awaiting approval is marked as possibly sent: a deduplicated one is
sent again under its provider key while the provider's window lasts and ends
unknown after it, a reconcilable one is looked up before any send, an
at-most-once one ends unknown for an operator to resolve. And intent ids move to
a new epoch, so that no new intent gets an id, or a provider key, that one
created after the restore point had.

--restore-point is the restore's target (recovery_target_time), RFC 3339; it
is refused if an intent was changed after it.`,
}

func (a *app) recover(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdRecover)
	point := fs.String("restore-point", "", "the restore's target time, RFC 3339 (recovery_target_time)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if _, err := a.parse(cmdRecover, fs, args, 0, 0); err != nil {
		return err
	}
	if *point == "" {
		return &usageError{cmd: cmdRecover.name, msg: "--restore-point is required"}
	}
	restorePoint, err := time.Parse(time.RFC3339Nano, *point)
	if err != nil {
		return &usageError{cmd: cmdRecover.name, msg: fmt.Sprintf("--restore-point: expected an RFC 3339 time such as 2026-12-04T21:30:00Z, got %q", *point)}
	}
	cfg, err := a.config(ctx)
	if err != nil {
		return err
	}
	pool, err := connect(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := intentdb.New(cfg.Schema)
	res, err := dbutil.WithTxV(ctx, pool, func(tx pgx.Tx) (*intentdb.RestoredResult, error) {
		return q.MarkRestored(ctx, tx, restorePoint)
	})
	var pointErr *intentdb.RestorePointError
	switch {
	case errors.Is(err, intentdb.ErrLiveProcesses), errors.As(err, &pointErr):
		return fmt.Errorf("nothing changed: %w", err)
	case err != nil:
		return err
	}
	total := 0
	for _, n := range res.Marked {
		total += n
	}
	if *asJSON {
		return writeJSON(a.stdout, map[string]any{"marked": res.Marked, "marked_total": total, "epoch": res.Epoch, "next_id": res.NextID})
	}
	fmt.Fprintf(a.stdout, "marked %d intents as possibly sent", total)
	states := make([]string, 0, len(res.Marked))
	for s := range res.Marked {
		states = append(states, s)
	}
	slices.Sort(states)
	for i, s := range states {
		sep := ", "
		if i == 0 {
			sep = " ("
		}
		fmt.Fprintf(a.stdout, "%s%s %d", sep, s, res.Marked[s])
	}
	if len(states) > 0 {
		fmt.Fprint(a.stdout, ")")
	}
	fmt.Fprintf(a.stdout, "\nintent ids now start at %d (epoch %d)\n", res.NextID, res.Epoch)
	fmt.Fprintln(a.stdout, "start serve; then outboxd intents list --state unknown, and resolve each against the provider")
	return nil
}

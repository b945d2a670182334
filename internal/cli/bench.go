package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/outbox-dev/outbox/internal/bench"
	"github.com/outbox-dev/outbox/internal/daemon"
)

var cmdBench = &command{
	name: "bench",
	args: "[--count N] [--clients N] [--workers N] [--batch-count N] [--lane NAME]... [--json]",
	doc: `Measures, on DATABASE_URL, how fast outbox runs against plain River on the
same database at the same moment: each lane records --count units from
--clients callers, one unit per transaction, and runs them with a no-op,
counted once the outcome is durable. The lanes, by their names in --json:

  river InsertTx                 plain River: one InsertTx a caller's
                                 transaction, a no-op job (the baseline)
  outbox                         outbox as it ships: one EnqueueTx a caller's
                                 transaction, a deduplicated no-op effect,
                                 first attempts in batches
  hand-written outbox on River   what a River user writes by hand: an intents
                                 row with a unique key and InsertTx in the
                                 caller's transaction, a worker updating it
  river InsertTx, unique ByArgs  River's own deduplication
  outbox, a job per intent       outbox with OUTBOX_BATCH_FIRST_ATTEMPTS=false
  outbox, at most once           a claimed effect (written before the call)
  watermill-sql                  Watermill's PostgreSQL outbox: one Publish a
                                 caller's transaction (watermill-sql's log
                                 schema and offsets adapter), a subscriber
                                 whose handler records the key in a
                                 processed-keys table in its transaction
                                 (consumer-side dedupe); one subscriber
  river Insert (no caller tx)    River's Insert, a transaction of its own
  outbox (no caller tx)          outbox's Enqueue, as the HTTP API enqueues
                                 (concurrent calls share a transaction)

Each lane's maximum rate is measured first, then its commit-to-terminal
latency at half of plain River's maximum rate (terminal: River's job
completed, outbox's intent terminal; "job p99" is outbox's River job
completed, which comes after); last, batch inserts, --batch-count rows 1,000 a
transaction (River's InsertManyTx, outbox's EnqueueManyTx).

Each lane works in a schema of its own (outboxd_bench_ and a random suffix),
dropped afterwards, even on Ctrl-C; nothing else in the database is touched.
Progress goes to stderr; the table (or with --json the figures) to stdout.
Each lane runs on a pool of its own, sized like serve's for --workers plus
--clients and opened in full: with the defaults, the run holds at most 63
connections. A server that cannot take them (max_connections, its reserved
slots, a role's or database's CONNECTION LIMIT, less what others hold) is
named in one line before anything runs.
Ratios are against plain River measured in the same run: compare ratios, not
rates, across machines. "Like for like" sets each lane against River's lane
that inserts the same way (in a caller's transaction or without one);
"x hand-written" against the hand-written lane. The targets of docs/design.md
section 5 are checked and printed last. Peak RSS is this process's (callers,
River, dispatcher).

--lane NAME, repeated, runs only the lanes named (and plain River, the
baseline), for a shorter run; the targets of lanes left out are not checked.

Each lane's cost per action, at its maximum rate ("cost" in --json): WAL
bytes (pg_current_wal_lsn() before and after, so anything else the server
writes meanwhile counts: run it on a quiet server), index tuples written (one
per index of a table for each insert and each update that is not HOT, from
pg_stat_user_tables of the lane's schema; an upper bound for tables with
partial indexes) and the share of updates that were HOT.
Expect a few minutes with the defaults on a small machine.`,
}

// BenchSchemaPrefix starts the names of outboxd bench's throwaway schemas.
const BenchSchemaPrefix = "outboxd_bench_"

func (a *app) bench(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdBench)
	count := fs.Int("count", 10_000, "units per lane, `N`")
	clients := fs.Int("clients", 16, "concurrent callers, `N`")
	workersN := fs.Int("workers", 50, "River workers per queue on every lane, `N`")
	batchCount := fs.Int("batch-count", 50_000, "rows of the batch lanes, 1,000 a transaction, `N`")
	var lanes []string
	fs.Func("lane", "only this lane, by its name (repeat it; river InsertTx is always first), `NAME`", func(v string) error {
		lanes = append(lanes, v)
		return nil
	})
	asJSON := fs.Bool("json", false, "print the figures as JSON")
	if _, err := a.parse(cmdBench, fs, args, 0, 0); err != nil {
		return err
	}
	for _, f := range []struct {
		name      string
		v, lo, hi int
	}{{"count", *count, 100, 10_000_000}, {"clients", *clients, 1, 1000}, {"workers", *workersN, 1, workersMax}, {"batch-count", *batchCount, 1000, 10_000_000}} {
		if f.v < f.lo || f.v > f.hi {
			return &usageError{cmd: cmdBench.name, msg: fmt.Sprintf("--%s must be from %d to %d", f.name, f.lo, f.hi)}
		}
	}
	cfg, err := a.config(ctx)
	if err != nil {
		return err
	}
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	// The lanes run on pools of their own, one lane at a time: this one
	// only migrates, reads and drops the lanes' schemas.
	pool, err := connect(ctx, cfg, bench.PoolSize)
	if err != nil {
		return err
	}
	defer pool.Close()

	kinds, err := benchKinds(lanes)
	if err != nil {
		return err
	}
	progress := bench.NewProgress(a.stderr, len(kinds)*2+2)
	bcfg := &bench.Config{
		Clients: *clients,
		Count:   *count,
		// The callers, River's workers and the dispatcher's, like serve's
		// pool.
		LanePoolSize: daemon.PoolSize(*workersN) + int32(*clients),
		ProgressFunc: progress.Update,
		SchemaPrefix: BenchSchemaPrefix,
		Workers:      *workersN,
	}
	c, err := bench.Compare(ctx, pool, kinds, bcfg)
	var connsErr *bench.ConnectionsError
	if errors.As(err, &connsErr) {
		// Before anything ran, so no progress bar to end.
		return fmt.Errorf("bench needs %d connections with --workers %d and --clients %d, and the server allows %d (%s): lower --workers or --clients, or raise max_connections",
			connsErr.Need, *workersN, *clients, connsErr.Allowed, connsErr.Limit)
	}
	if err == nil {
		var batch *bench.BatchComparison
		batchCfg := *bcfg
		batchCfg.Count = *batchCount
		if batch, err = bench.CompareBatch(ctx, pool, &batchCfg); err == nil {
			progress.Finish()
			report := bench.NewReport(c, batch)
			if *asJSON {
				return writeJSON(a.stdout, report)
			}
			return report.WriteTable(a.stdout)
		}
	}
	progress.Finish()
	if ctx.Err() != nil {
		fmt.Fprintln(a.stderr, "outboxd: bench interrupted; the lane's schema was dropped")
		return &exitError{code: ExitFailure}
	}
	return err
}

// benchKinds are the lanes --lane names (every lane when none), in
// bench.Kinds's order, the baseline always first.
func benchKinds(names []string) ([]bench.Kind, error) {
	if len(names) == 0 {
		return bench.Kinds, nil
	}
	want := map[string]bool{bench.LaneRiverInsertTx: true}
	for _, n := range names {
		if !slices.ContainsFunc(bench.Kinds, func(k bench.Kind) bool { return k.Name == n }) {
			return nil, &usageError{cmd: cmdBench.name, msg: fmt.Sprintf("--lane: no lane %q", n)}
		}
		want[n] = true
	}
	var out []bench.Kind
	for _, k := range bench.Kinds {
		if want[k.Name] {
			out = append(out, k)
		}
	}
	return out, nil
}

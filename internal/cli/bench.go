package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

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
	// The callers, River's workers and the dispatcher's, like serve's pool.
	pool, err := connect(ctx, cfg, daemon.PoolSize(*workersN)+int32(*clients))
	if err != nil {
		return err
	}
	defer pool.Close()

	kinds, err := benchKinds(lanes)
	if err != nil {
		return err
	}
	progress := newBenchProgress(a.stderr, len(kinds)*2+2)
	bcfg := &bench.Config{Clients: *clients, Count: *count, Workers: *workersN, ProgressFunc: progress.update, SchemaPrefix: BenchSchemaPrefix}
	c, err := bench.Compare(ctx, pool, kinds, bcfg)
	if err == nil {
		var batch *bench.BatchComparison
		batchCfg := *bcfg
		batchCfg.Count = *batchCount
		if batch, err = bench.CompareBatch(ctx, pool, &batchCfg); err == nil {
			progress.finish()
			return a.printBench(c, batch, *asJSON)
		}
	}
	progress.finish()
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

// benchReport is outboxd bench --json.
type benchReport struct {
	Lanes []benchLane `json:"lanes"`
	// OfferedRate is the paced runs' rate: half of plain River's maximum.
	OfferedRate float64                `json:"offered_rate_per_s"`
	Batch       *bench.BatchComparison `json:"batch"`
	BatchRatio  float64                `json:"batch_ratio"`
	// Targets are docs/design.md's performance targets, as measured.
	Targets []benchTarget `json:"targets"`
}

type benchLane struct {
	Name  string        `json:"name"`
	Max   *bench.Result `json:"max"`
	Paced *bench.Result `json:"paced"`
	// Ratio is the lane's maximum rate over plain River's.
	Ratio float64 `json:"ratio"`
	// RatioLikeForLike is the lane's maximum rate over that of River's
	// lane that inserts the same way (in a caller's transaction or not).
	RatioLikeForLike float64 `json:"ratio_like_for_like"`
	// RatioToHandWritten is the lane's maximum rate over the hand-written
	// outbox's.
	RatioToHandWritten float64 `json:"ratio_to_hand_written"`
	// Cost is what an action of the lane cost the database at its maximum
	// rate (Max.Cost): WAL bytes, index entries and the HOT share of its
	// updates.
	Cost *bench.Cost `json:"cost"`
}

// benchTarget is one target and whether this run met it.
type benchTarget struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Bound is the target: at least Bound, or at most when AtMost.
	Bound  float64 `json:"bound"`
	AtMost bool    `json:"at_most,omitempty"`
	Met    bool    `json:"met"`
}

// benchTargets checks docs/design.md section 5's targets against a run.
func benchTargets(c *bench.Comparison, batch *bench.BatchComparison) []benchTarget {
	lane := func(name string) int {
		for i, k := range c.Kinds {
			if k.Name == name {
				return i
			}
		}
		return -1
	}
	out, noTx, river := lane(bench.LaneOutbox), lane(bench.LaneOutboxNoCallerTx), lane(bench.LaneRiverInsertTx)
	var targets []benchTarget
	add := func(name string, value, bound float64, atMost bool) {
		met := value >= bound
		if atMost {
			met = value <= bound
		}
		targets = append(targets, benchTarget{Name: name, Value: value, Bound: bound, AtMost: atMost, Met: met})
	}
	if noTx >= 0 {
		add("(a) outbox (no caller tx) over river Insert (no caller tx)", c.RatioLikeForLike(noTx), 1.2, false)
	}
	if out >= 0 {
		add("(b) outbox over river InsertTx", c.RatioLikeForLike(out), 1.2, false)
		if c.RatioTo(out, bench.LaneHandWritten) > 0 {
			add("(c) outbox over the hand-written outbox on River", c.RatioTo(out, bench.LaneHandWritten), 1.5, false)
		}
		if river >= 0 && c.Paced[river].P99 > 0 {
			add("(d) outbox's p99 commit-to-terminal at half River's maximum over River's", float64(c.Paced[out].P99)/float64(c.Paced[river].P99), 1.0, true)
			add("(f) outbox's p50 commit-to-terminal at half River's maximum, ms", ms(c.Paced[out].P50), 50, true)
		}
		if wm := lane(bench.LaneWatermill); wm >= 0 {
			add("(g) outbox over watermill-sql", c.RatioTo(out, bench.LaneWatermill), 1.0, false)
			if w := c.Max[wm].Cost; w != nil && w.WALBytesPerAction > 0 && c.Max[out].Cost != nil {
				add("(h) outbox's WAL per intent over watermill-sql's per message", c.Max[out].Cost.WALBytesPerAction/w.WALBytesPerAction, 2.0, true)
			}
		}
		if river >= 0 && c.Max[river].Cost != nil && c.Max[river].Cost.WALBytesPerAction > 0 && c.Max[out].Cost != nil {
			add("(i) outbox's WAL per intent over River's per job", c.Max[out].Cost.WALBytesPerAction/c.Max[river].Cost.WALBytesPerAction, 0.5, true)
		}
	}
	add("(e) EnqueueManyTx over InsertManyTx (1,000 a transaction)", batch.Ratio(), 1.0, false)
	maxRSS := int64(0)
	for _, r := range c.Max {
		maxRSS = max(maxRSS, r.PeakRSS)
	}
	add("peak RSS of the bench process, MB (serve alone is less: docs/design.md)", float64(maxRSS)/(1<<20), 64, true)
	return targets
}

func (a *app) printBench(c *bench.Comparison, batch *bench.BatchComparison, asJSON bool) error {
	report := benchReport{OfferedRate: c.OfferedRate, Batch: batch, BatchRatio: batch.Ratio(), Targets: benchTargets(c, batch)}
	for i, k := range c.Kinds {
		report.Lanes = append(report.Lanes, benchLane{Name: k.Name, Max: c.Max[i], Paced: c.Paced[i], Ratio: c.Ratio(i),
			RatioLikeForLike: c.RatioLikeForLike(i), RatioToHandWritten: c.RatioTo(i, bench.LaneHandWritten), Cost: c.Max[i].Cost})
	}
	if asJSON {
		return writeJSON(a.stdout, report)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "lane\tmax rate/s\tx plain River\tlike for like\tx hand-written\tp50 ms\tp99 ms\tjob p99 ms\tpeak RSS MB\tWAL B/action\tindex tuples/action\tHOT updates\tHOT, intents\t\n")
	for _, l := range report.Lanes {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t\n", l.Name, l.Max.Rate, l.Ratio, l.RatioLikeForLike, l.RatioToHandWritten,
			ms(l.Paced.P50), ms(l.Paced.P99), ms(l.Paced.JobP99), float64(l.Max.PeakRSS)/(1<<20), costColumns(l.Cost))
	}
	fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%s\t\n", batch.River.Name+" (1,000/tx)", batch.River.Rate, "-", 1.0, "-", "-", "-", "-", float64(batch.River.PeakRSS)/(1<<20), costColumns(batch.River.Cost))
	fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%s\t\n", batch.Outbox.Name+" (1,000/tx)", batch.Outbox.Rate, "-", batch.Ratio(), "-", "-", "-", "-", float64(batch.Outbox.PeakRSS)/(1<<20), costColumns(batch.Outbox.Cost))
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(a.stdout, "\np50 and p99: commit to terminal, at %.0f units/s (half of plain River's maximum): River's job completed,\n"+
		"or outbox's intent terminal; job p99: commit to the River job completed (after the intent, for outbox).\n"+
		"Like for like: against River's lane that inserts the same way (in a caller's transaction or without one).\n"+
		"WAL, index tuples and HOT updates: per action at the maximum rate; WAL is the server's (anything else running counts),\n"+
		"index tuples one per index for each insert and non-HOT update of the lane's tables (an upper bound with partial indexes).\n"+
		"Batch rows: inserts only, 1,000 a transaction; their ratio is against River's InsertManyTx.\n\nTargets (docs/design.md, section 5):\n", c.OfferedRate); err != nil {
		return err
	}
	for _, t := range report.Targets {
		op, verdict := ">=", "met"
		if t.AtMost {
			op = "<="
		}
		if !t.Met {
			verdict = "NOT met"
		}
		fmt.Fprintf(a.stdout, "  %-78s %6.2f (%s %.2f) %s\n", t.Name, t.Value, op, t.Bound, verdict)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// costColumns is a lane's cost as the table's last four columns: the
// last, the HOT share of the intent table's own updates.
func costColumns(c *bench.Cost) string {
	if c == nil {
		return "-\t-\t-\t-"
	}
	share := func(updates, hot float64) string {
		if updates == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*hot)
	}
	intents := "-"
	if t := c.Tables["outbox_intent"]; t != nil {
		intents = share(t.UpdatesPerAction, t.HOTUpdateShare)
	}
	return fmt.Sprintf("%.0f\t%.1f\t%s\t%s", c.WALBytesPerAction, c.IndexTuplesPerAction, share(c.UpdatesPerAction, c.HOTUpdateShare), intents)
}

// benchProgress draws a progress bar on stderr: rewritten in place on a
// terminal, one line per lane elsewhere.
type benchProgress struct {
	w     io.Writer
	tty   bool
	lanes int

	mu   sync.Mutex
	lane string
	seen int
	last time.Time
}

func newBenchProgress(w io.Writer, lanes int) *benchProgress {
	f, ok := w.(*os.File)
	tty := false
	if ok {
		info, err := f.Stat()
		tty = err == nil && info.Mode()&os.ModeCharDevice != 0
	}
	return &benchProgress{w: w, tty: tty, lanes: lanes}
}

func (p *benchProgress) update(lane string, done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lane != p.lane {
		p.lane = lane
		p.seen++
		if !p.tty {
			fmt.Fprintf(p.w, "bench: lane %d of %d: %s, %d units\n", p.seen, p.lanes, lane, total)
		}
	}
	if !p.tty || (done < total && time.Since(p.last) < 100*time.Millisecond) {
		return
	}
	p.last = time.Now()
	const width = 30
	filled := width * done / max(1, total)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] lane %d of %d: %s %d/%d",
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), p.seen, p.lanes, lane, done, total)
}

func (p *benchProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

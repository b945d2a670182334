// Package bench measures outbox end to end against plain River, in one run
// against one database, so that the figures are ratios of the same machine
// at the same moment.
//
// Both sides do the same job: callers commit one unit of work per
// transaction (plain River: one InsertTx; outbox: one EnqueueTx), workers
// execute it with a no-op, and a unit counts when River reports its job
// completed, which for outbox is after the intent's outcome is durable. Its
// latency is to its terminal state: the job's completion for River, the
// intent's terminal state for outbox (its state-change notification), which
// comes before its job's completion (Result.JobP99).
// The lanes marked "no caller tx" insert without a caller's transaction:
// River's Insert, which opens one of its own, and outbox's Enqueue, whose
// concurrent calls share a transaction (a group commit), the way the HTTP
// API enqueues.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/migrations"
)

// Config configures a run.
type Config struct {
	// Clients is the number of concurrent callers. Defaults to 16.
	Clients int
	// Count is the number of units per measurement. Defaults to 10,000.
	Count int
	// LanePoolSize is the size of each lane's pool of its own, which its
	// callers, River's workers and the dispatcher share. Defaults to
	// Clients more than serve's pool for Workers (daemon.PoolSize): the
	// larger of 20 and Workers/2+10.
	LanePoolSize int32
	// Logger receives progress. Defaults to a logger that discards.
	Logger *slog.Logger
	// SchemaPrefix starts the name of each lane's throwaway schema.
	// Defaults to "bench_".
	SchemaPrefix string
	// ProgressFunc, when set, is called as units complete (about every
	// 1% of Count) with the lane's name and how many completed.
	ProgressFunc func(lane string, done, total int)
	// Workers is River's MaxWorkers per queue, on both sides. Defaults to 50.
	Workers int
}

func (c *Config) withDefaults() *Config {
	out := *c
	if out.Clients == 0 {
		out.Clients = 16
	}
	if out.Count == 0 {
		out.Count = 10_000
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Workers == 0 {
		out.Workers = dispatcher.WorkersDefault
	}
	if out.LanePoolSize == 0 {
		out.LanePoolSize = int32(out.Clients + max(20, out.Workers/2+10))
	}
	if out.SchemaPrefix == "" {
		out.SchemaPrefix = "bench_"
	}
	return &out
}

// Result is one measurement.
type Result struct {
	// Name says what was measured ("river", "outbox noop").
	Name string `json:"name"`
	// Count is how many units completed.
	Count int `json:"count"`
	// Elapsed is from the first commit to the last completion.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Rate is Count / Elapsed, per second.
	Rate float64 `json:"rate_per_s"`
	// OfferedRate is the callers' paced rate, or 0 for "as fast as they can".
	OfferedRate float64 `json:"offered_rate_per_s"`
	// P50 and P99 are commit-to-terminal latencies: to the job's
	// completion for River, to the intent's terminal state for outbox (its
	// state-change notification, which Wait and the HTTP API's ?wait=
	// answer on).
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	// JobP50 and JobP99 are commit-to-completed latencies of the River jobs
	// (for River, P50 and P99). For outbox they come after the intent is
	// terminal, by River's completer's wait: it writes completions every
	// 250 ms unless 100 are waiting.
	JobP50 time.Duration `json:"job_p50_ns"`
	JobP99 time.Duration `json:"job_p99_ns"`
	// TxP50 and TxP99 are the callers' transaction times (begin to commit).
	TxP50 time.Duration `json:"tx_p50_ns"`
	TxP99 time.Duration `json:"tx_p99_ns"`
	// PeakRSS is the most resident memory this process (callers, River,
	// and for outbox the dispatcher) held during the measurement, sampled
	// every 50 ms; 0 where /proc is not available.
	PeakRSS int64 `json:"peak_rss_bytes"`
	// Cost is what the measured units cost the database, per unit.
	Cost *Cost `json:"cost"`
}

func (r *Result) String() string {
	return fmt.Sprintf("%-28s %8.0f/s  p50 %7.1fms  p99 %7.1fms  job p99 %7.1fms  tx p50 %5.2fms p99 %5.2fms",
		r.Name, r.Rate, ms(r.P50), ms(r.P99), ms(r.JobP99), ms(r.TxP50), ms(r.TxP99))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// measure drives count units through sys from cfg.Clients callers, paced at
// offered units per second in all (0: unpaced), and waits for all to complete.
func measure(ctx context.Context, sys system, name string, cfg *Config, offered float64) (*Result, error) {
	var (
		mu       sync.Mutex
		job      = newLatencies(cfg.Count) // commit to the job completed
		term     = newLatencies(cfg.Count) // commit to terminal, when it comes first
		txTimes  = make([]time.Duration, 0, cfg.Count)
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
	)
	done := make(chan struct{})
	step := max(1, cfg.Count/100)
	go func() {
		defer close(done)
		for id := range sys.completed() {
			mu.Lock()
			n := job.event(id, time.Now())
			mu.Unlock()
			if cfg.ProgressFunc != nil && (n%step == 0 || n == cfg.Count) {
				cfg.ProgressFunc(name, n, cfg.Count)
			}
			if n == cfg.Count {
				return
			}
		}
	}()
	termDone := make(chan struct{})
	if sys.terminal() != nil {
		go func() {
			defer close(termDone)
			jobsDone := done
			var grace <-chan time.Time
			for {
				select {
				case id := <-sys.terminal():
					mu.Lock()
					n := term.event(id, time.Now())
					mu.Unlock()
					if n == cfg.Count {
						return
					}
				case <-jobsDone:
					// Every job completed after its intent ended, so every
					// notification was sent; some may still be in flight.
					jobsDone, grace = nil, time.After(10*time.Second)
				case <-grace:
					return
				}
			}
		}()
	} else {
		close(termDone)
	}
	rss := sampleRSS()
	defer rss.stop()

	start := time.Now()
	var interval time.Duration
	if offered > 0 {
		interval = time.Duration(float64(time.Second) / offered)
	}
	var wg sync.WaitGroup
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Count || ctx.Err() != nil {
					return
				}
				if interval > 0 {
					// Open-loop pacing: unit i is due at start + i*interval,
					// whatever earlier units took.
					if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
						time.Sleep(d)
					}
				}
				t0 := time.Now()
				id, err := sys.insert(ctx, i)
				t1 := time.Now()
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				mu.Lock()
				txTimes = append(txTimes, t1.Sub(t0))
				job.commit(id, t1)
				term.commit(id, t1)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("%s: error inserting: %w", name, firstErr)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		n := len(job.lat)
		mu.Unlock()
		return nil, fmt.Errorf("%s: only %d of %d completed within 2 minutes", name, n, cfg.Count)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	elapsed := time.Since(start)
	<-termDone
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(job.lat)
	slices.Sort(term.lat)
	slices.Sort(txTimes)
	res := &Result{
		Name:        name,
		Count:       len(job.lat),
		Elapsed:     elapsed,
		Rate:        float64(len(job.lat)) / elapsed.Seconds(),
		OfferedRate: offered,
		JobP50:      pct(job.lat, 0.50),
		JobP99:      pct(job.lat, 0.99),
		TxP50:       pct(txTimes, 0.50),
		TxP99:       pct(txTimes, 0.99),
		PeakRSS:     rss.stop(),
	}
	res.P50, res.P99 = res.JobP50, res.JobP99
	if sys.terminal() != nil {
		if len(term.lat) != cfg.Count {
			return nil, fmt.Errorf("%s: %d of %d units were seen terminal", name, len(term.lat), cfg.Count)
		}
		res.P50, res.P99 = pct(term.lat, 0.50), pct(term.lat, 0.99)
	}
	return res, nil
}

// latencies pairs units' commits with one kind of event, in whichever order
// they are seen.
type latencies struct {
	committed map[int64]time.Time
	early     map[int64]time.Time // seen before the caller recorded its commit
	lat       []time.Duration
}

func newLatencies(n int) *latencies {
	return &latencies{committed: make(map[int64]time.Time, n), early: map[int64]time.Time{}, lat: make([]time.Duration, 0, n)}
}

func (l *latencies) commit(id int64, at time.Time) {
	if ev, ok := l.early[id]; ok {
		l.lat = append(l.lat, ev.Sub(at))
		delete(l.early, id)
		return
	}
	l.committed[id] = at
}

// event records id's event at and returns how many units have had theirs.
func (l *latencies) event(id int64, at time.Time) int {
	if c, ok := l.committed[id]; ok {
		l.lat = append(l.lat, at.Sub(c))
		delete(l.committed, id)
	} else {
		l.early[id] = at
	}
	return len(l.lat)
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// Kind names a system to measure.
type Kind struct {
	// Name is how results are labelled.
	Name string
	// Guarantee selects the outbox noop effect's guarantee; empty means
	// plain River.
	Guarantee effects.Guarantee
	// Unique, for plain River, inserts each job with UniqueOpts{ByArgs}
	// on the caller's key: the closest a River user gets to
	// deduplication.
	Unique bool
	// BatchFirstAttempts, for outbox, runs first attempts in batches
	// (dispatcher's default; deduplicated effects only). Without it the
	// lane sets DisableBatchFirstAttempts, so that both ways are measured.
	BatchFirstAttempts bool
	// NoCallerTx inserts without a caller's transaction: River's Insert
	// (which opens one of its own), outbox's Enqueue (concurrent calls
	// share one, as the HTTP API's enqueues do).
	NoCallerTx bool
	// HandWritten is what a River user writes by hand: an intents table
	// with a unique key, a row and River's InsertTx in the caller's
	// transaction, a worker that updates the row.
	HandWritten bool
	// Watermill is Watermill's PostgreSQL outbox (watermill-sql's log
	// schema and offsets adapter) with consumer-side dedupe: see
	// watermillSystem.
	Watermill bool
}

// peer reports whether k is another system than outbox and plain River.
func (k Kind) peer() bool { return k.HandWritten || k.Watermill }

// Lane names of Kinds, which outboxd bench --json reports.
const (
	LaneRiverInsertTx      = "river InsertTx"
	LaneOutbox             = "outbox"
	LaneHandWritten        = "hand-written outbox on River"
	LaneRiverInsert        = "river Insert (no caller tx)"
	LaneOutboxNoCallerTx   = "outbox (no caller tx)"
	LaneOutboxJobPerIntent = "outbox, a job per intent"
	LaneWatermill          = "watermill-sql"
)

// Kinds are the systems Compare measures: the baseline first. "outbox" is
// the default configuration (a deduplicated effect, first attempts in
// batches); "outbox, a job per intent" is the same with batches off
// (OUTBOX_BATCH_FIRST_ATTEMPTS=false), and the at-most-once lane is what
// every claimed effect costs. The lanes without a caller's transaction come
// last, River's first, so that each outbox lane has a River lane that
// inserts the same way (Comparison.RatioLikeForLike).
var Kinds = []Kind{
	{Name: LaneRiverInsertTx},
	{Name: LaneOutbox, Guarantee: effects.GuaranteeDeduplicated, BatchFirstAttempts: true},
	{Name: LaneHandWritten, HandWritten: true},
	{Name: "river InsertTx, unique ByArgs", Unique: true},
	{Name: LaneOutboxJobPerIntent, Guarantee: effects.GuaranteeDeduplicated},
	{Name: "outbox, at most once", Guarantee: effects.GuaranteeAtMostOnce},
	{Name: LaneWatermill, Watermill: true},
	{Name: LaneRiverInsert, NoCallerTx: true},
	{Name: LaneOutboxNoCallerTx, Guarantee: effects.GuaranteeDeduplicated, BatchFirstAttempts: true, NoCallerTx: true},
}

// Run measures one kind in a fresh schema, which it drops afterwards.
func Run(ctx context.Context, pool *pgxpool.Pool, kind Kind, cfg *Config, offered float64) (*Result, error) {
	cfg = cfg.withDefaults()
	schema, drop, err := throwawaySchema(ctx, pool, cfg)
	if err != nil {
		return nil, err
	}
	defer drop()
	return runIn(ctx, pool, schema, kind, cfg, offered)
}

// runIn measures one kind in schema, already migrated, on a pool of the
// lane's own (see newLanePool) with every connection open.
func runIn(ctx context.Context, shared *pgxpool.Pool, schema string, kind Kind, cfg *Config, offered float64) (*Result, error) {
	pool, err := newLanePool(ctx, shared, schema, cfg.LanePoolSize)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := warmPool(ctx, pool); err != nil {
		return nil, err
	}
	var sys system
	switch {
	case kind.Watermill:
		sys, err = newWatermillSystem(ctx, pool, schema, cfg)
	case kind.HandWritten:
		sys, err = newHandWrittenSystem(ctx, pool, schema, cfg)
	case kind.Guarantee == "":
		sys, err = newRiverSystem(ctx, pool, schema, kind, cfg)
	default:
		sys, err = newOutboxSystem(ctx, pool, schema, "noop", kind, cfg)
	}
	if err != nil {
		return nil, err
	}
	var before *costCounters
	res, err := func() (*Result, error) {
		if err := warmUp(ctx, sys, min(warmUpUnits, cfg.Count)); err != nil {
			return nil, fmt.Errorf("%s: %w", kind.Name, err)
		}
		var err error
		if before, err = readCost(ctx, pool, schema); err != nil {
			return nil, err
		}
		return measure(ctx, sys, kind.Name, cfg, offered)
	}()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if serr := sys.stop(stopCtx); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	// Read after the stop, so that what the lane's units still wrote after
	// they counted as done (River's completions of outbox's jobs) is in,
	// and after the lane's backends have flushed their counters.
	if err := closeLanePool(ctx, shared, pool, schema); err != nil {
		return nil, err
	}
	after, err := readCost(ctx, shared, schema)
	if err != nil {
		return nil, err
	}
	if res.Cost, err = costBetween(ctx, shared, before, after, res.Count); err != nil {
		return nil, err
	}
	return res, nil
}

// warmUpUnits is how many units a lane runs, untimed, before it is measured.
const warmUpUnits = 50

// warmUp runs n units through sys, one caller, and waits for all of them to
// complete, so that the measurement starts with everything running: the
// system's listeners are up (an enqueue made before the drain listens waits
// for its next poll, up to a second, which on a run of a few seconds is
// most of the difference between two lanes) and its statements prepared.
// Its units are numbered below zero, apart from the measured ones.
func warmUp(ctx context.Context, sys system, n int) error {
	pending := make(map[int64]bool, n)
	pendingTerm := make(map[int64]bool, n)
	for i := range n {
		id, err := sys.insert(ctx, -1-i)
		if err != nil {
			return fmt.Errorf("error warming up: %w", err)
		}
		pending[id] = true
		if sys.terminal() != nil {
			pendingTerm[id] = true
		}
	}
	timeout := time.After(time.Minute)
	for len(pending)+len(pendingTerm) > 0 {
		select {
		case id := <-sys.completed():
			delete(pending, id)
		case id := <-sys.terminal(): // never ready when nil
			delete(pendingTerm, id)
		case <-timeout:
			return fmt.Errorf("%d warm-up units of %d not completed within a minute", max(len(pending), len(pendingTerm)), n)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// throwawaySchema creates and migrates a schema of its own for one lane;
// drop removes it, even when ctx has ended.
func throwawaySchema(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (schema string, drop func(), err error) {
	schema = fmt.Sprintf("%s%x", cfg.SchemaPrefix, rand.Uint32())
	drop = func() {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		// One implicit transaction, so the lock timeout is this drop's only.
		sql := "SELECT set_config('lock_timeout', '10s', true); DROP SCHEMA IF EXISTS " + pgx.Identifier{schema}.Sanitize() + " CASCADE"
		if _, err := pool.Exec(dropCtx, sql); err != nil {
			// The schema is this lane's alone: a session that holds one of
			// its tables in a transaction left idle (a lane's client that
			// lost a connection mid-transaction) is ended, so that nothing
			// is left behind.
			cfg.Logger.WarnContext(dropCtx, "error dropping a lane's schema, ending the sessions idle in its tables", slog.String("schema", schema), slog.String("error", err.Error()))
			_, _ = pool.Exec(dropCtx, `SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a
				WHERE a.state LIKE 'idle in transaction%' AND a.pid IN (
					SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
					WHERE c.relnamespace = $1::regnamespace)`, schema)
			_, _ = pool.Exec(dropCtx, sql)
		}
	}
	m, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err == nil {
		_, err = m.Up(ctx)
	}
	if err != nil {
		drop()
		return "", nil, err
	}
	return schema, drop, nil
}

// Comparison is the outcome of Compare.
type Comparison struct {
	// Max are the unpaced runs, baseline first.
	Max []*Result `json:"max"`
	// Paced are the runs at OfferedRate, baseline first.
	Paced []*Result `json:"paced"`
	// OfferedRate is half the baseline's maximum rate.
	OfferedRate float64 `json:"offered_rate_per_s"`
	// Kinds are the kinds measured, in the order of Max and Paced.
	Kinds []Kind `json:"-"`
}

// Ratio is outbox's maximum rate over the baseline's, for Max[i].
func (c *Comparison) Ratio(i int) float64 { return c.Max[i].Rate / c.Max[0].Rate }

// RatioLikeForLike is Max[i]'s rate over that of the plain River lane that
// inserts the same way (in a caller's transaction or without one); Ratio(i)
// where no such lane was measured.
func (c *Comparison) RatioLikeForLike(i int) float64 {
	for j, k := range c.Kinds {
		if k.Guarantee == "" && !k.Unique && !k.peer() && k.NoCallerTx == c.Kinds[i].NoCallerTx {
			return c.Max[i].Rate / c.Max[j].Rate
		}
	}
	return c.Ratio(i)
}

// RatioTo is Max[i]'s rate over that of the lane called name, or 0 when no
// such lane was measured.
func (c *Comparison) RatioTo(i int, name string) float64 {
	for j, k := range c.Kinds {
		if k.Name == name {
			return c.Max[i].Rate / c.Max[j].Rate
		}
	}
	return 0
}

// Compare measures every kind's maximum rate, then every kind's latency at
// half the baseline's maximum rate (latency at saturation is only queueing).
// pool needs PoolSize connections; a lane runs on a pool of its own, one
// lane at a time. Before anything else, Compare returns a
// *ConnectionsError if the server would not take pool's connections, a
// lane's pool and the lane's sessions together.
func Compare(ctx context.Context, pool *pgxpool.Pool, kinds []Kind, cfg *Config) (*Comparison, error) {
	cfg = cfg.withDefaults()
	if len(kinds) == 0 || kinds[0].Guarantee != "" || kinds[0].Unique || kinds[0].peer() {
		return nil, errors.New("bench: the first kind must be the River baseline")
	}
	need := int(pool.Config().MaxConns) + int(cfg.LanePoolSize) + laneSessions
	if err := checkConnections(ctx, pool, need); err != nil {
		return nil, err
	}
	c := &Comparison{Kinds: kinds}
	for _, k := range kinds {
		cfg.Logger.InfoContext(ctx, "measuring maximum rate", slog.String("kind", k.Name))
		r, err := Run(ctx, pool, k, cfg, 0)
		if err != nil {
			return nil, err
		}
		c.Max = append(c.Max, r)
	}
	c.OfferedRate = c.Max[0].Rate / 2
	paced := *cfg
	// A paced run lasts about five seconds, with at least 1,000 units for
	// its p99, and never more units than cfg.Count.
	paced.Count = min(cfg.Count, max(1000, int(c.OfferedRate*5)))
	for _, k := range kinds {
		cfg.Logger.InfoContext(ctx, "measuring latency at offered load", slog.String("kind", k.Name), slog.Float64("rate", c.OfferedRate))
		r, err := Run(ctx, pool, k, &paced, c.OfferedRate)
		if err != nil {
			return nil, err
		}
		c.Paced = append(c.Paced, r)
	}
	return c, nil
}

package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// BenchmarkCompare runs plain River and outbox side by side and reports both
// maximum rates, their ratio, and both p99 latencies at half River's maximum:
//
//	TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//	    go test ./internal/bench -run '^$' -bench Compare -benchtime 1x
//
// BENCH_COUNT sets the units per run (default 10,000), BENCH_WORKERS the
// River workers per queue on both sides (default 50, OUTBOX_WORKERS's default).
func BenchmarkCompare(b *testing.B) {
	count, _ := strconv.Atoi(os.Getenv("BENCH_COUNT"))
	workers, _ := strconv.Atoi(os.Getenv("BENCH_WORKERS"))
	pool := testdb.Pool(b)
	for b.Loop() {
		c, err := Compare(context.Background(), pool, Kinds, &Config{Count: count, Workers: workers})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range c.Max {
			b.Logf("max   %s", r)
		}
		for _, r := range c.Paced {
			b.Logf("paced %s", r)
		}
		// Kinds, by name: see Kinds.
		lane := func(name string) int { return slices.IndexFunc(c.Kinds, func(k Kind) bool { return k.Name == name }) }
		out, noTx := lane(LaneOutbox), lane(LaneOutboxNoCallerTx)
		b.ReportMetric(c.Max[0].Rate, "river/s")
		b.ReportMetric(c.Max[out].Rate, "outbox/s")
		b.ReportMetric(c.Ratio(out), "ratio")
		b.ReportMetric(c.RatioTo(out, LaneHandWritten), "ratio_hand_written")
		b.ReportMetric(c.Ratio(lane(LaneOutboxJobPerIntent)), "ratio_job_per_intent")
		b.ReportMetric(c.RatioLikeForLike(noTx), "ratio_no_tx")
		b.ReportMetric(ms(c.Paced[out].P99), "outbox_p99_ms")
		b.ReportMetric(ms(c.Paced[0].P99), "river_p99_ms")
	}
}

// TestRunSmall checks the harness itself on a small run of each kind. The
// kinds run three at a time, each lane's pool 16 connections: their
// measures are only checked for sanity here, and the lanes wait on
// PostgreSQL far more than they use the CPU.
func TestRunSmall(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	for kinds := range slices.Chunk(Kinds, 3) {
		t.Run(kinds[0].Name, func(t *testing.T) {
			t.Parallel()
			for _, k := range kinds {
				r, err := Run(context.Background(), pool, k, &Config{Count: 200, Clients: 4, Workers: 5, LanePoolSize: 16}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if r.Count != 200 || r.Rate <= 0 || r.P99 < r.P50 || r.JobP99 < r.JobP50 {
					t.Fatalf("implausible result %+v", r)
				}
				// An intent ends before its job completes; River's unit is its job.
				if r.P99 > r.JobP99 || r.P50 > r.JobP50 || (k.Guarantee == "" && (r.P50 != r.JobP50 || r.P99 != r.JobP99)) {
					t.Fatalf("%s: terminal latencies p50 %v p99 %v against the job's %v and %v", k.Name, r.P50, r.P99, r.JobP50, r.JobP99)
				}
				requireCostSane(t, k.Name, r.Cost)
				if k.Guarantee != "" {
					// Each intent inserted once, and updated at least once (its
					// outcome), as PostgreSQL's statistics count them: n_tup_ins
					// also counts rolled-back and speculative inserts (the
					// re-submits), and another backend's counts reach the view up
					// to a second late, so the figures are near, not exact.
					intent := r.Cost.Tables["outbox_intent"]
					require.NotNil(t, intent, k.Name)
					require.Greater(t, intent.InsertsPerAction, 0.5, k.Name)
					require.Less(t, intent.InsertsPerAction, 1.5, k.Name)
					require.Greater(t, intent.UpdatesPerAction, 0.5, k.Name)
				}
			}
		})
	}
}

// requireCostSane checks a lane's cost: every unit inserts at least one
// row (River's job, outbox's intent), that row an entry in each of its
// table's indexes, and a unit then updates its row or rows; the counters
// were all flushed (not a delay's zeros).
func requireCostSane(t *testing.T, name string, c *Cost) {
	t.Helper()
	require.NotNil(t, c, name)
	require.Positive(t, c.WALBytesPerAction, name)
	require.GreaterOrEqual(t, c.InsertsPerAction, 1.0, name)
	require.GreaterOrEqual(t, c.IndexTuplesPerAction, c.InsertsPerAction, name)
	require.Positive(t, c.UpdatesPerAction, name)
	require.True(t, c.HOTUpdateShare >= 0 && c.HOTUpdateShare <= 1, "%s: HOT share %v", name, c.HOTUpdateShare)
}

// TestRatioLikeForLike checks that each lane is set against River's lane of
// the same way: in a caller's transaction or without one.
func TestRatioLikeForLike(t *testing.T) {
	t.Parallel()
	c := &Comparison{Kinds: Kinds}
	for i := range Kinds {
		c.Max = append(c.Max, &Result{Rate: float64(100 * (i + 1))})
	}
	var riverNoTx int
	for i, k := range Kinds {
		if k.Guarantee == "" && !k.Unique && !k.peer() && k.NoCallerTx {
			riverNoTx = i
		}
	}
	require.NotZero(t, riverNoTx, "a plain River lane without a caller's transaction")
	for i, k := range Kinds {
		want := c.Max[i].Rate / c.Max[0].Rate
		if k.NoCallerTx {
			want = c.Max[i].Rate / c.Max[riverNoTx].Rate
		}
		require.InDelta(t, want, c.RatioLikeForLike(i), 1e-9, k.Name)
		require.InDelta(t, c.Max[i].Rate/c.Max[0].Rate, c.Ratio(i), 1e-9, k.Name)
	}
}

// BenchmarkOne runs one kind at its maximum rate, for profiling:
//
//	BENCH_KIND=2 go test ./internal/bench -run '^$' -bench One -benchtime 1x -cpuprofile cpu.out
func BenchmarkOne(b *testing.B) {
	count, _ := strconv.Atoi(os.Getenv("BENCH_COUNT"))
	kind, _ := strconv.Atoi(os.Getenv("BENCH_KIND"))
	pool := testdb.Pool(b)
	for b.Loop() {
		workersN, _ := strconv.Atoi(os.Getenv("BENCH_WORKERS"))
		clients, _ := strconv.Atoi(os.Getenv("BENCH_CLIENTS"))
		r, err := Run(context.Background(), pool, Kinds[kind], &Config{Clients: clients, Count: count, Workers: workersN}, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s", r)
		b.ReportMetric(r.Rate, "units/s")
	}
}

// BenchmarkGrowth measures what a table of terminal intents costs, for
// each size of BENCH_SIZES (default 0,1000000,5000000; docs/design.md, "Cost
// as the table grows"):
//
//	TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//	    go test ./internal/bench -run '^$' -bench Growth -benchtime 1x -timeout 60m
func BenchmarkGrowth(b *testing.B) {
	sizes := []int{0, 1_000_000, 5_000_000}
	if s := os.Getenv("BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			require.NoError(b, err)
			sizes = append(sizes, n)
		}
	}
	count, _ := strconv.Atoi(os.Getenv("BENCH_COUNT"))
	pool := testdb.Pool(b)
	for b.Loop() {
		results, err := Growth(context.Background(), pool, sizes, &Config{Count: count})
		require.NoError(b, err)
		for _, r := range results {
			b.Logf("terminal %9d  fill %6.1fs  table %6.0f MB  indexes %6.0f MB  enqueue p50 %5.2fms p99 %5.2fms  during prune p99 %5.2fms  drain %6.0f/s  pruned %8d in %6.2fs",
				r.Terminal, r.FillTime.Seconds(), float64(r.TableBytes)/(1<<20), float64(r.IndexBytes)/(1<<20),
				ms(r.EnqueueP50), ms(r.EnqueueP99), ms(r.EnqueueDuringPruneP99), r.Drain.Rate, r.Pruned, r.PruneTime.Seconds())
		}
	}
}

// TestGrowthSmall checks the growth harness on a small table.
func TestGrowthSmall(t *testing.T) {
	t.Parallel()
	results, err := Growth(context.Background(), testdb.Pool(t), []int{8000}, &Config{Count: 200, Clients: 4})
	require.NoError(t, err)
	r := results[0]
	require.Equal(t, 8000, r.Terminal)
	require.InDelta(t, 1000, r.Pruned, 2, "an eighth of the rows is past retention")
	require.Positive(t, r.TableBytes)
	require.Positive(t, r.IndexBytes)
	require.LessOrEqual(t, r.EnqueueP50, r.EnqueueP99)
	require.Equal(t, 200, r.Drain.Count)
}

// BenchmarkEnqueueMany measures batch enqueue: 1,000 intents per
// transaction, with nothing executing them.
func BenchmarkEnqueueMany(b *testing.B) {
	pool := testdb.Pool(b)
	ctx := context.Background()
	schema := testdb.Schema(b)
	m, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(b, err)
	_, err = m.Up(ctx)
	require.NoError(b, err)
	e, err := noop.New(nil)
	require.NoError(b, err)
	reg, err := effects.NewRegistry(e)
	require.NoError(b, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
	require.NoError(b, err)
	const perTx = 1000
	n := 0
	start := time.Now()
	for b.Loop() {
		params := make([]*outbox.EnqueueParams, perTx)
		for i := range params {
			params[i] = &outbox.EnqueueParams{Key: fmt.Sprintf("batch-%d", n), Effect: "noop", Args: map[string]any{"n": n}}
			n++
		}
		tx, err := pool.Begin(ctx)
		require.NoError(b, err)
		_, err = client.EnqueueManyTx(ctx, tx, params)
		require.NoError(b, err)
		require.NoError(b, tx.Commit(ctx))
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "intents/s")
}

// BenchmarkCompareBatch compares batch inserts, 1,000 a transaction: River's
// InsertManyTx against outbox's EnqueueManyTx, in one run (BENCH_COUNT
// units each, default 50,000, as outboxd bench's --batch-count):
//
//	TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//	    go test ./internal/bench -run '^$' -bench CompareBatch -benchtime 1x
func BenchmarkCompareBatch(b *testing.B) {
	count, _ := strconv.Atoi(os.Getenv("BENCH_COUNT"))
	if count == 0 {
		count = 50_000
	}
	pool := testdb.Pool(b)
	for b.Loop() {
		c, err := CompareBatch(context.Background(), pool, &Config{Count: count})
		require.NoError(b, err)
		b.Logf("%s", c.River)
		b.Logf("%s", c.Outbox)
		b.ReportMetric(c.River.Rate, "river/s")
		b.ReportMetric(c.Outbox.Rate, "outbox/s")
		b.ReportMetric(c.Ratio(), "ratio")
	}
}

// BenchmarkRowChecks compares enqueues into a schema whose row checks are
// CHECK constraints (migration 007) with one whose checks are in the insert
// trigger (008), alternating between the two in one run so that the
// machine's drift hits both alike (docs/design.md, "The enqueue's checks"):
// single EnqueueTx calls, each its own transaction, and EnqueueManyTx
// batches of 1,000, all on one connection. It reports the CPU time that
// connection's PostgreSQL backend spent (from /proc, so PostgreSQL must run
// on this machine), which is what a busy database runs out of; the round
// trip's wall time is mostly the network and the client.
//
//	go test ./internal/bench -run '^$' -bench RowChecks -benchtime 1x
func BenchmarkRowChecks(b *testing.B) {
	pool := testdb.Pool(b)
	ctx := context.Background()
	e, err := noop.New(nil)
	require.NoError(b, err)
	reg, err := effects.NewRegistry(e)
	require.NoError(b, err)
	clients := make([]*outbox.Client, 2) // 007, 008
	for i := range clients {
		schema := testdb.Schema(b)
		m, err := migrations.New(pool, &migrations.Config{Schema: schema})
		require.NoError(b, err)
		_, err = m.Up(ctx)
		require.NoError(b, err)
		if i == 0 {
			res, err := m.Down(ctx, nil)
			require.NoError(b, err)
			require.Equal(b, 8, res.Applied[0].Version, "the newest migration is the one compared")
		}
		clients[i], err = outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
		require.NoError(b, err)
	}
	conn, err := pool.Acquire(ctx)
	require.NoError(b, err)
	defer conn.Release()
	var pid int
	require.NoError(b, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	if _, err := backendCPU(pid); err != nil {
		b.Skipf("PostgreSQL's backend is not visible in /proc: %v", err)
	}

	const rounds, singles, batches, perBatch = 10, 500, 5, 1000
	var single, batch [2]time.Duration
	n := 0
	enqueue := func(client *outbox.Client, count int) {
		params := make([]*outbox.EnqueueParams, count)
		for i := range params {
			params[i] = &outbox.EnqueueParams{Key: fmt.Sprintf("checks-%d", n), Effect: "noop", Args: map[string]any{"n": n}}
			n++
		}
		tx, err := conn.Begin(ctx)
		require.NoError(b, err)
		if count == 1 {
			_, err = client.EnqueueTx(ctx, tx, params[0])
		} else {
			_, err = client.EnqueueManyTx(ctx, tx, params)
		}
		require.NoError(b, err)
		require.NoError(b, tx.Commit(ctx))
	}
	measure := func(into *time.Duration, fn func()) {
		before, err := backendCPU(pid)
		require.NoError(b, err)
		fn()
		after, err := backendCPU(pid)
		require.NoError(b, err)
		*into += after - before
	}
	for b.Loop() {
		for range rounds {
			for i, client := range clients {
				measure(&single[i], func() {
					for range singles {
						enqueue(client, 1)
					}
				})
				measure(&batch[i], func() {
					for range batches {
						enqueue(client, perBatch)
					}
				})
			}
		}
	}
	perSingle := func(i int) float64 { return float64(single[i].Microseconds()) / float64(b.N*rounds*singles) }
	perRow := func(i int) float64 { return float64(batch[i].Microseconds()) / float64(b.N*rounds*batches*perBatch) }
	b.Logf("EnqueueTx (with its transaction): %.0f us of backend CPU with constraints (007), %.0f us with the trigger (008)", perSingle(0), perSingle(1))
	b.Logf("EnqueueManyTx: %.1f us a row with constraints (007), %.1f us with the trigger (008)", perRow(0), perRow(1))
	b.ReportMetric(perSingle(1)/perSingle(0), "single-008/007")
	b.ReportMetric(perRow(1)/perRow(0), "batch-008/007")
}

// backendCPU is the CPU time (user and system) process pid has used, from
// /proc/PID/stat, counted in clock ticks (USER_HZ, 100 a second on Linux).
func backendCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis: state is the
	// first, utime the 12th and stime the 13th.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

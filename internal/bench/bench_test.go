package bench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/outbox-dev/outbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// BenchmarkCompare runs plain River and outbox side by side and reports both
// maximum rates, their ratio, and both p99 latencies at half River's maximum:
//
//	TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//	    go test ./internal/bench -run '^$' -bench Compare -benchtime 1x
//
// BENCH_COUNT sets the units per run (default 10,000).
func BenchmarkCompare(b *testing.B) {
	count, _ := strconv.Atoi(os.Getenv("BENCH_COUNT"))
	pool := testdb.Pool(b)
	for b.Loop() {
		c, err := Compare(context.Background(), pool, Kinds, &Config{Count: count})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range c.Max {
			b.Logf("max   %s", r)
		}
		for _, r := range c.Paced {
			b.Logf("paced %s", r)
		}
		b.ReportMetric(c.Max[0].Rate, "river/s")
		b.ReportMetric(c.Max[1].Rate, "outbox/s")
		b.ReportMetric(c.Ratio(1), "ratio")
		b.ReportMetric(c.Ratio(2), "ratio_at_most_once")
		b.ReportMetric(ms(c.Paced[0].P99), "river_p99_ms")
		b.ReportMetric(ms(c.Paced[1].P99), "outbox_p99_ms")
	}
}

// TestRunSmall checks the harness itself on a small run of each kind.
func TestRunSmall(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	for _, k := range Kinds {
		r, err := Run(context.Background(), pool, k, &Config{Count: 200, Clients: 4}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Count != 200 || r.Rate <= 0 || r.P99 < r.P50 {
			t.Fatalf("implausible result %+v", r)
		}
	}
}

// BenchmarkOne runs one kind at its maximum rate, for profiling:
//
//	BENCH_KIND=1 go test ./internal/bench -run '^$' -bench One -benchtime 1x -cpuprofile cpu.out
func BenchmarkOne(b *testing.B) {
	count, _ := strconv.Atoi(os.Getenv("BENCH_COUNT"))
	kind, _ := strconv.Atoi(os.Getenv("BENCH_KIND"))
	pool := testdb.Pool(b)
	for b.Loop() {
		workersN, _ := strconv.Atoi(os.Getenv("BENCH_WORKERS"))
		r, err := Run(context.Background(), pool, Kinds[kind], &Config{Count: count, Workers: workersN}, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s", r)
		b.ReportMetric(r.Rate, "units/s")
	}
}

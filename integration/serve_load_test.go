package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkServeLoad drives one `outboxd serve` (the sandbox's noop effect,
// 50 workers) with HTTP enqueues from 32 connections as fast as it answers,
// until every intent is terminal, and reports the enqueue rate and serve's
// peak resident memory (VmHWM) over the whole run: the figure behind the
// 64 MB target in docs/design.md.
//
//	TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//	    go test ./integration -run '^$' -bench ServeLoad -benchtime 1x
//
// BENCH_COUNT sets the enqueues (default 20,000).
func BenchmarkServeLoad(b *testing.B) {
	count, _ := strconv.Atoi(os.Getenv("BENCH_COUNT"))
	if count == 0 {
		count = 20_000
	}
	const conns = 32
	e := newEnv(b, "OUTBOX_WORKERS=50")
	srv := e.serve()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}
	run := 0
	for b.Loop() {
		run++
		var next atomic.Int64
		var firstErr error
		var errOnce sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(count) {
						return
					}
					if err := postIntent(client, srv.addr, fmt.Sprintf("load-%d-%d", run, i)); err != nil {
						errOnce.Do(func() { firstErr = err })
						return
					}
				}
			}()
		}
		wg.Wait()
		require.NoError(b, firstErr)
		enqueued := time.Since(start)
		// Every intent terminal: serve's memory includes draining them.
		require.Eventually(b, func() bool {
			var left int
			err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.table("outbox_intent")+
				` WHERE key LIKE $1 AND state NOT IN ('succeeded', 'failed', 'cancelled', 'unknown')`, fmt.Sprintf("load-%d-%%", run)).Scan(&left)
			return err == nil && left == 0
		}, 5*time.Minute, 100*time.Millisecond)
		total := time.Since(start)
		hwm := peakRSS(b, srv.cmd.Process.Pid)
		b.Logf("%d HTTP enqueues in %s (%.0f/s), all terminal after %s (%.0f/s); serve's peak RSS %.1f MB",
			count, enqueued.Round(time.Millisecond), float64(count)/enqueued.Seconds(),
			total.Round(time.Millisecond), float64(count)/total.Seconds(), float64(hwm)/(1<<20))
		b.ReportMetric(float64(count)/enqueued.Seconds(), "enqueues/s")
		b.ReportMetric(float64(hwm)/(1<<20), "peak_rss_MB")
	}
}

// postIntent enqueues one noop intent over HTTP.
func postIntent(client *http.Client, addr, key string) error {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/intents", strings.NewReader(`{"effect": "noop", "args": {"n": 1}}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("enqueue %s: HTTP %d", key, resp.StatusCode)
	}
	return nil
}

// peakRSS reads a process's peak resident set size (VmHWM) in bytes.
func peakRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(tb, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(tb, err)
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/mcpraw"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// benchPoll is how often the benchmark's clients poll tasks/get. The
// server suggests 1 s (pollIntervalMs) for a queued intent; a client that
// honoured it would measure its own sleep, so the lane polls faster and
// says so.
const benchPoll = 20 * time.Millisecond

// BenchmarkLaneMCP is the mcp lane (docs/agents.md, "Tasks and approvals
// in the host"): recorded tool calls through /mcp with the tasks extension
// (create, re-issue under a new request id, poll tasks/get to the end)
// against the same effect called through the Go library (Enqueue, then
// Wait) in the same run, one action at a time by each of 8 callers. It
// prints actions per second and p50/p99 from the first call to the end for
// both, and their ratio.
//
//	TEST_DATABASE_URL=... go test ./internal/mcpserver -run '^$' -bench LaneMCP -benchtime 1x
func BenchmarkLaneMCP(b *testing.B) {
	const callers, perCaller = 8, 60
	bundle := setup(b)
	testrun.Dispatcher(b, bundle.pool, &dispatcher.Config{Effects: bundle.registry, Schema: bundle.schema})
	url := bundle.serveHTTP(b, &mcpserver.Config{Namespace: "bench"})
	ctx := context.Background()

	run := func(name string, action func(caller, i int) error) (rate float64, p50, p99 time.Duration) {
		var (
			mu        sync.Mutex
			latencies []time.Duration
			failed    atomic.Int64
			wg        sync.WaitGroup
		)
		start := time.Now()
		for c := range callers {
			wg.Go(func() {
				for i := range perCaller {
					t0 := time.Now()
					if err := action(c, i); err != nil {
						failed.Add(1)
						b.Errorf("%s: %v", name, err)
						return
					}
					mu.Lock()
					latencies = append(latencies, time.Since(t0))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		slices.Sort(latencies)
		require.Zero(b, failed.Load())
		require.Len(b, latencies, callers*perCaller, "%s: a caller stopped", name)
		return float64(len(latencies)) / elapsed.Seconds(), latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	}

	// One call first, where a failure is reported as such.
	probe := &mcpraw.Client{URL: url, Token: "bench", Tasks: true}
	probe.CallTask(b, "charge_card", map[string]any{"amount": 1, "currency": "usd", "customer": "cus_probe", "idempotency_key": "probe"})

	for n := 0; n < b.N; n++ {
		round := fmt.Sprintf("r%d", n)
		libRate, libP50, libP99 := run("library", func(c, i int) error {
			key := fmt.Sprintf("lib-%s-%d-%d", round, c, i)
			if _, err := bundle.client.Enqueue(ctx, &outbox.EnqueueParams{Namespace: "bench", Key: key, Effect: "charge",
				Args: map[string]any{"amount": 100 + i, "currency": "usd", "customer": "cus_lib"}}); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			got, err := bundle.client.Wait(wctx, "bench", key)
			if err != nil {
				return err
			}
			if got.State != outbox.StateSucceeded {
				return fmt.Errorf("intent %s ended %s", key, got.State)
			}
			return nil
		})
		mcpRate, mcpP50, mcpP99 := run("mcp", func(c, i int) error {
			client := &mcpraw.Client{URL: url, Token: "bench", Tasks: true}
			// Arguments of their own: the model-key guard refuses the same
			// action under another key.
			args := map[string]any{"amount": 100 + i, "currency": "usd", "customer": fmt.Sprintf("cus_mcp_%d", c),
				"idempotency_key": fmt.Sprintf("mcp-%s-%d-%d", round, c, i)}
			first := client.CallTask(b, "charge_card", args)
			// Re-issued under a new request id: the same task, or, once the
			// intent ended, the stored result.
			again := client.Do(b, "tools/call", map[string]any{"name": "charge_card", "arguments": args})
			var res struct {
				ResultType string `json:"resultType"`
				TaskID     string `json:"taskId"`
			}
			if again.Error != nil || json.Unmarshal(again.Result, &res) != nil {
				return fmt.Errorf("re-issued call: %s", again.Result)
			}
			switch {
			case res.ResultType == "complete":
				return nil
			case res.TaskID != first.TaskID:
				return fmt.Errorf("re-issued call answered task %s, not %s", res.TaskID, first.TaskID)
			}
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(benchPoll) {
				if got := client.GetTask(b, first.TaskID); got.Status == "completed" {
					return nil
				}
			}
			return fmt.Errorf("task %s did not complete", first.TaskID)
		})
		b.Logf("library: %.0f actions/s, p50 %s, p99 %s", libRate, libP50.Round(time.Millisecond), libP99.Round(time.Millisecond))
		b.Logf("mcp tasks (create, re-issue, poll every %s): %.0f actions/s, p50 %s, p99 %s; %.2fx the library's rate",
			benchPoll, mcpRate, mcpP50.Round(time.Millisecond), mcpP99.Round(time.Millisecond), mcpRate/libRate)
		b.ReportMetric(mcpRate, "mcp_actions/s")
		b.ReportMetric(libRate, "lib_actions/s")
		b.ReportMetric(mcpRate/libRate, "mcp/lib")
	}
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
)

// taskUpstream is an MCP server (the go-sdk's) whose create_order answers
// a client that declares the tasks extension with a task, which completes
// a few seconds later: a slow write, as an upstream with tasks runs it. It
// counts the orders created and the polls.
type taskUpstream struct {
	delay time.Duration

	mu        sync.Mutex
	orders    map[string]time.Time // task id -> when it completes
	cancelled map[string]bool      // task id -> cancelled by tasks/cancel
	polls     atomic.Int64
	cancels   atomic.Int64
	// holdCancel keeps a cancelled task working until it is false again:
	// the test decides when the upstream acts on a cancel.
	holdCancel atomic.Bool
	sync       atomic.Int64 // calls answered without a task
}

type taskUpstreamSlotKey struct{}

type taskUpstreamParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type taskUpstreamResult struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          *int64          `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result,omitempty"`
}

type taskUpstreamAck struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

func (u *taskUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.orders)
}

func startTaskUpstream(t *testing.T, delay time.Duration) (*taskUpstream, string) {
	t.Helper()
	u := &taskUpstream{delay: delay, orders: map[string]time.Time{}, cancelled: map[string]bool{}}
	srv := mcp.NewServer(&mcp.Implementation{Name: "orders", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{
		Name: "create_order", Description: "Creates an order.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"item":{"type":"string"}},"required":["item"]}`),
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		caps := req.ClientCapabilities()
		if caps == nil || caps.Extensions["io.modelcontextprotocol/tasks"] == nil {
			u.sync.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "no tasks declared"}}, IsError: true}, nil
		}
		var args struct {
			Item string `json:"item"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &args)
		delay := u.delay
		if args.Item == "slow" {
			delay = 10 * time.Minute // ends only by a cancel
		}
		u.mu.Lock()
		id := fmt.Sprintf("order-task-%d", len(u.orders)+1)
		u.orders[id] = time.Now().Add(delay)
		u.mu.Unlock()
		now := time.Now().UTC().Format(time.RFC3339)
		*ctx.Value(taskUpstreamSlotKey{}).(**taskUpstreamResult) = &taskUpstreamResult{ResultType: "task", TaskID: id, Status: "working",
			CreatedAt: now, LastUpdatedAt: now, PollIntervalMs: 200}
		return &mcp.CallToolResult{}, nil
	})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/call" {
				return next(ctx, method, req)
			}
			var task *taskUpstreamResult
			res, err := next(context.WithValue(ctx, taskUpstreamSlotKey{}, &task), method, req)
			if err == nil && task != nil {
				return task, nil
			}
			return res, err
		}
	})
	require.NoError(t, mcp.AddReceivingCustomMethod(srv, "tasks/get", func(_ context.Context, _ *mcp.ServerSession, p *taskUpstreamParams) (*taskUpstreamResult, error) {
		u.polls.Add(1)
		u.mu.Lock()
		ready, ok := u.orders[p.TaskID]
		cancelled := u.cancelled[p.TaskID]
		u.mu.Unlock()
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
		}
		now := time.Now().UTC().Format(time.RFC3339)
		r := &taskUpstreamResult{ResultType: "complete", TaskID: p.TaskID, Status: "working", CreatedAt: now, LastUpdatedAt: now, PollIntervalMs: 200}
		if cancelled && !u.holdCancel.Load() {
			r.Status = "cancelled"
		} else if time.Now().After(ready) {
			r.Status = "completed"
			r.Result = json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"order %s created"}],"structuredContent":{"order":%q}}`, p.TaskID, p.TaskID))
		}
		return r, nil
	}))
	// tasks/cancel stops a task that has not completed; the ack is empty
	// either way, as the extension says.
	require.NoError(t, mcp.AddReceivingCustomMethod(srv, "tasks/cancel", func(_ context.Context, _ *mcp.ServerSession, p *taskUpstreamParams) (*taskUpstreamAck, error) {
		u.cancels.Add(1)
		u.mu.Lock()
		defer u.mu.Unlock()
		if ready, ok := u.orders[p.TaskID]; ok && time.Now().Before(ready) {
			u.cancelled[p.TaskID] = true
		}
		return &taskUpstreamAck{ResultType: "complete"}, nil
	}))
	h := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(h.Close)
	return u, h.URL
}

// TestUpstreamTasks puts an upstream whose write answers with a task behind
// serve: the task's id is recorded on the attempt, serve polls it to the
// end; killed with SIGKILL while polling, a new serve resumes polling the
// recorded task, and the upstream created one order.
func TestUpstreamTasks(t *testing.T) {
	t.Parallel()
	up, url := startTaskUpstream(t, 4*time.Second)
	file := filepath.Join(t.TempDir(), "effects.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`upstreams:
  orders:
    url: "{env.ORDERS_URL}"
    wait: 1s
    timeout: 3s
    tools:
      create_order:
        guarantee: at_most_once
`), 0o600))
	e := newEnv(t, "OUTBOX_EFFECTS_FILE="+file, "ORDERS_URL="+url, "OUTBOX_EFFECT_TIMEOUT=5s")
	stdout, stderr, code := e.run("effects", "pin", file)
	require.Equal(t, 0, code, "pin: %s%s", stdout, stderr)
	first := e.serve()
	ctx := context.Background()

	t.Run("PolledToTheEnd", func(t *testing.T) {
		_, err := e.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "order-1", Effect: "orders_create_order", Args: map[string]any{"item": "book"}})
		require.NoError(t, err)
		got := e.wait("order-1", 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "%+v", got.Error)
		require.Contains(t, string(got.Result), "order-task-1")
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, 1, up.count())
		require.Positive(t, up.polls.Load())
		require.Zero(t, up.sync.Load(), "outbox declares the tasks extension")
	})

	t.Run("KilledWhilePollingResumes", func(t *testing.T) {
		_, err := e.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "order-2", Effect: "orders_create_order", Args: map[string]any{"item": "lamp"}})
		require.NoError(t, err)
		// Polling: the order exists, and a poll came after it.
		require.Eventually(t, func() bool { return up.count() == 2 }, 30*time.Second, 20*time.Millisecond)
		before := up.polls.Load()
		require.Eventually(t, func() bool { return up.polls.Load() > before }, 10*time.Second, 20*time.Millisecond)
		var checkpoint string
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT checkpoint::text FROM `+e.table("outbox_intent")+` WHERE key = 'order-2'`).Scan(&checkpoint))
		require.Contains(t, checkpoint, `"upstream_task": "order-task-2"`, "the task's id is recorded before the polling")
		first.kill9()
		killedPolls := up.polls.Load()

		e.serve()
		got := e.wait("order-2", 120*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "%+v", got.Error)
		require.Contains(t, string(got.Result), "order-task-2")
		require.Greater(t, up.polls.Load(), killedPolls, "the new process polled the recorded task")
		require.Equal(t, 2, up.count(), "one order each: the resumed attempt never called again")
		fmt.Printf("TestUpstreamTasks: orders=%d polls=%d attempts=%d (kill -9 while polling, resumed)\n", up.count(), up.polls.Load(), got.Attempts)
	})
	t.Run("OperatorCancelSentUpstream", func(t *testing.T) {
		_, err := e.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "order-3", Effect: "orders_create_order", Args: map[string]any{"item": "slow"}})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var n int
			_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table("outbox_intent")+` WHERE key = 'order-3' AND checkpoint IS NOT NULL`).Scan(&n)
			return n == 1
		}, 30*time.Second, 20*time.Millisecond, "the upstream's task is recorded")

		up.holdCancel.Store(true)
		_, err = e.client.Cancel(ctx, &outbox.CancelParams{Key: "order-3", By: "operator:ana", Note: "wrong item"})
		require.ErrorIs(t, err, outbox.ErrCancelRequested, "the upstream holds the work: the cancel is passed on")
		// The command line says so too, and succeeds.
		stdout, stderr, code := e.run("intents", "cancel", "order-3")
		require.Equal(t, 0, code, "%s%s", stdout, stderr)
		require.Contains(t, stdout+stderr, "passed to")
		require.Eventually(t, func() bool { return up.cancels.Load() == 1 }, 30*time.Second, 20*time.Millisecond, "tasks/cancel reaches the upstream")
		running, err := e.client.Get(ctx, "", "order-3")
		require.NoError(t, err)
		require.Equal(t, outbox.StateRunning, running.State, "the upstream has not stopped yet")
		up.holdCancel.Store(false)

		got := e.wait("order-3", 60*time.Second)
		require.Equal(t, outbox.StateCancelled, got.State, "%+v", got.Error)
		require.NotNil(t, got.ResolvedBy)
		require.Equal(t, "operator:ana", *got.ResolvedBy, "the first request is the one recorded")
		require.NotNil(t, got.ResolutionNote)
		require.Equal(t, "wrong item", *got.ResolutionNote)
		require.NotNil(t, got.Error)
		require.Equal(t, "upstream_task_cancelled", got.Error.Code)
		require.Equal(t, int64(1), up.cancels.Load(), "tasks/cancel sent once")
		require.Equal(t, 3, up.count(), "no order was created again")
	})
}

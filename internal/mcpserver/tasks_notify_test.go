package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/mcpraw"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/testrun"
)

// listeners counts the LISTEN connections on the schema's state-change
// channel.
func (b *testBundle) listeners(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{b.schema + ".intent_changed"}.Sanitize()).Scan(&n))
	return n
}

func TestMCPTaskNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop"})
	urlOther := b.serveHTTP(t, &mcpserver.Config{Namespace: "other"})
	c := &mcpraw.Client{URL: url, Token: "agent-1", Tasks: true}
	other := &mcpraw.Client{URL: urlOther, Token: "agent-2", Tasks: true}

	// No dispatcher runs yet: the charge stays queued, a slow effect.
	task := c.CallTask(t, "charge_card", map[string]any{"amount": 1500, "currency": "usd", "customer": "cus_1", "idempotency_key": "order-1"})
	theirs := other.CallTask(t, "charge_card", map[string]any{"amount": 1, "currency": "usd", "customer": "cus_2", "idempotency_key": "theirs"})

	t.Run("UndeclaredExtension", func(t *testing.T) {
		plain := &mcpraw.Client{URL: url, Token: "agent-1"}
		l := plain.Listen(t, map[string]any{"taskIds": []string{task.TaskID}})
		require.Equal(t, http.StatusBadRequest, l.Status)
		m := l.Next(t)
		mcpraw.RequireError(t, &m.Response, -32021)
		require.JSONEq(t, `{"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}`, string(m.Error.Data))
	})

	t.Run("BadTaskIDs", func(t *testing.T) {
		l := c.Listen(t, map[string]any{"taskIds": []int{1, 2}})
		require.Equal(t, http.StatusBadRequest, l.Status)
		m := l.Next(t)
		mcpraw.RequireError(t, &m.Response, -32602)
		require.Contains(t, m.Error.Message, "taskIds")
	})

	t.Run("WithoutTaskIDsTheSDKAnswers", func(t *testing.T) {
		l := c.Listen(t, map[string]any{"toolsListChanged": true})
		_, ack := l.Ack(t)
		require.JSONEq(t, `true`, string(ack["toolsListChanged"]))
		require.NotContains(t, ack, "taskIds")
	})

	t.Run("OtherNamespacesAndForgedIDsNotAcknowledged", func(t *testing.T) {
		l := c.Listen(t, map[string]any{"taskIds": []string{theirs.TaskID, "AAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAA", "not-a-task"}})
		ids, _ := l.Ack(t)
		require.Empty(t, ids)
		// Nothing to report on: the listen ends at once.
		l.RequireEnd(t)
	})

	t.Run("ClientGoesAway", func(t *testing.T) {
		l := c.Listen(t, map[string]any{"taskIds": []string{task.TaskID}})
		ids, _ := l.Ack(t)
		require.Equal(t, []string{task.TaskID}, ids)
		require.Equal(t, "working", l.NextTask(t).Status)
		require.Eventually(t, func() bool { return b.listeners(t) == 1 }, 10*time.Second, 10*time.Millisecond)
		l.Close()
		// The listen's watch ends with the request: no LISTEN is left.
		require.Eventually(t, func() bool { return b.listeners(t) == 0 }, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("WorkingThenCompleted", func(t *testing.T) {
		// Both kinds asked for: only the tasks are served, and
		// acknowledged; a duplicate id is acknowledged once.
		l := c.Listen(t, map[string]any{"taskIds": []string{task.TaskID, theirs.TaskID, task.TaskID}, "toolsListChanged": true})
		ids, ack := l.Ack(t)
		require.Equal(t, []string{task.TaskID}, ids)
		require.NotContains(t, ack, "toolsListChanged")
		first := l.NextTask(t)
		require.Equal(t, task.TaskID, first.TaskID)
		require.Equal(t, "working", first.Status)
		require.Equal(t, "queued", first.StatusMessage)
		require.Nil(t, first.Result)

		testrun.Dispatcher(t, b.pool, &dispatcher.Config{Effects: b.registry, Schema: b.schema})
		var last *mcpraw.Task
		for last = l.NextTask(t); last.Status == "working"; last = l.NextTask(t) {
			require.Equal(t, task.TaskID, last.TaskID)
			require.Contains(t, last.StatusMessage, "attempt")
		}
		require.Equal(t, "completed", last.Status)
		require.NotNil(t, last.Result)
		require.False(t, last.Result.IsError)
		var answer struct {
			State string `json:"state"`
			Key   string `json:"key"`
		}
		require.NoError(t, json.Unmarshal(last.Result.StructuredContent, &answer))
		require.Equal(t, "succeeded", answer.State)
		require.Equal(t, "order-1", answer.Key)
		// The notification is what tasks/get answers.
		got := c.GetTask(t, task.TaskID)
		require.Equal(t, got.Status, last.Status)
		require.Equal(t, got.CreatedAt, last.CreatedAt)
		require.Equal(t, got.LastUpdatedAt, last.LastUpdatedAt)
		require.JSONEq(t, string(got.Result.StructuredContent), string(last.Result.StructuredContent))
		l.RequireEnd(t)
	})

	t.Run("AlreadyEnded", func(t *testing.T) {
		l := c.Listen(t, map[string]any{"taskIds": []string{task.TaskID}})
		ids, _ := l.Ack(t)
		require.Equal(t, []string{task.TaskID}, ids)
		require.Equal(t, "completed", l.NextTask(t).Status)
		l.RequireEnd(t)
	})
}

// Over stdio (outboxd mcp): the listen's notifications share the
// connection with the SDK's answers; a notifications/cancelled stops it.
func TestMCPTaskNotificationsStdio(t *testing.T) {
	t.Parallel()
	b := setup(t)
	server, err := mcpserver.New(b.pool, b.client, &mcpserver.Config{Namespace: "shop"})
	require.NoError(t, err)
	clientRead, serverWrite := io.Pipe()
	serverRead, clientWrite := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	ss, err := server.Connect(ctx, mcpserver.ListenTransport(server, &mcp.IOTransport{Reader: serverRead, Writer: serverWrite}), nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		_ = ss.Close()
		_ = clientWrite.Close()
	})
	c := mcpraw.Stdio(clientWrite, clientRead)
	c.Tasks = true

	tasks := make([]string, 2)
	for i := range tasks {
		tasks[i] = c.CallTask(t, "charge_card", map[string]any{"amount": 100 + i, "currency": "usd", "customer": "cus_s",
			"idempotency_key": fmt.Sprintf("stdio-%d", i)}).TaskID
	}

	t.Run("UndeclaredExtension", func(t *testing.T) {
		c.Tasks = false
		defer func() { c.Tasks = true }()
		l := c.Listen(t, map[string]any{"taskIds": tasks})
		m := l.Next(t)
		mcpraw.RequireError(t, &m.Response, -32021)
	})

	t.Run("CancelledListen", func(t *testing.T) {
		l := c.Listen(t, map[string]any{"taskIds": tasks[:1]})
		ids, _ := l.Ack(t)
		require.Equal(t, tasks[:1], ids)
		require.Equal(t, "working", l.NextTask(t).Status)
		l.Close()
		require.Eventually(t, func() bool { return b.listeners(t) == 0 }, 10*time.Second, 10*time.Millisecond)
		// The connection serves on.
		require.Equal(t, "working", c.GetTask(t, tasks[0]).Status)
	})

	t.Run("WorkingThenCompleted", func(t *testing.T) {
		l := c.Listen(t, map[string]any{"taskIds": tasks})
		ids, _ := l.Ack(t)
		require.Equal(t, tasks, ids)
		seen := map[string]bool{}
		for range tasks {
			n := l.NextTask(t)
			require.Equal(t, "working", n.Status)
			seen[n.TaskID] = true
		}
		require.Len(t, seen, 2)
		// Calls and listens interleave on the one connection.
		require.Equal(t, "working", c.GetTask(t, tasks[1]).Status)
		testrun.Dispatcher(t, b.pool, &dispatcher.Config{Effects: b.registry, Schema: b.schema})
		completed := map[string]bool{}
		for len(completed) < len(tasks) {
			n := l.NextTask(t)
			if n.Status == "completed" {
				require.False(t, completed[n.TaskID], "a task completed twice")
				completed[n.TaskID] = true
				require.False(t, n.Result.IsError)
			}
		}
		l.RequireEnd(t)
	})
}

package integration

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/mcpraw"
	"github.com/outbox-dev/outbox/outbox"
)

// TestMCPTasksServe follows an MCP task across real outboxd processes: a
// task created on one serve replica, polled on another, the first killed
// with SIGKILL before the task ends, the task ended by an approval and
// polled to completion on a process started after the kill; and over stdio
// (outboxd mcp), the same task ids as over HTTP.
func TestMCPTasksServe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.serve()
	second := e.serve()
	c1 := &mcpraw.Client{URL: "http://" + first.addr + "/mcp", Tasks: true}
	c2 := &mcpraw.Client{URL: "http://" + second.addr + "/mcp", Tasks: true}
	args := map[string]any{"amount": 2500, "currency": "usd", "customer": "cus_k", "idempotency_key": "task-1", "require_approval": true}

	// Held for an operator: the task outlives the process that created it.
	task := c1.CallTask(t, "charge_card", args)
	require.Equal(t, "working", task.Status)
	require.Contains(t, task.StatusMessage, "an operator decides")
	require.Equal(t, task.TaskID, c2.GetTask(t, task.TaskID).TaskID)
	// Re-issued under a new request id, on the other replica: the same task.
	require.Equal(t, task.TaskID, c2.CallTask(t, "charge_card", args).TaskID)

	first.kill9()
	third := e.serve()
	c3 := &mcpraw.Client{URL: "http://" + third.addr + "/mcp", Tasks: true}
	require.Equal(t, "working", c3.GetTask(t, task.TaskID).Status)

	// A host listens for the task's status instead of polling it.
	listen := c3.Listen(t, map[string]any{"taskIds": []string{task.TaskID}})
	agreed, _ := listen.Ack(t)
	require.Equal(t, []string{task.TaskID}, agreed)
	held := listen.NextTask(t)
	require.Equal(t, "working", held.Status)
	require.Contains(t, held.StatusMessage, "an operator decides")

	intent, err := e.client.Get(context.Background(), "", "task-1")
	require.NoError(t, err)
	_, err = e.client.Approve(context.Background(), &outbox.ApprovalParams{Key: "task-1", ArgsSHA256: intent.ArgsSHA256, By: "test"})
	require.NoError(t, err)
	notified := listen.NextTask(t)
	for ; notified.Status == "working"; notified = listen.NextTask(t) {
		require.NotEqual(t, held.StatusMessage, notified.StatusMessage, "a notification without a change")
	}
	require.Equal(t, "completed", notified.Status)
	require.Contains(t, string(notified.Result.StructuredContent), `"state":"succeeded"`)
	listen.RequireEnd(t)
	var done *mcpraw.Task
	require.Eventually(t, func() bool {
		done = c3.GetTask(t, task.TaskID)
		return done.Status == "completed"
	}, 60*time.Second, 200*time.Millisecond)
	require.False(t, done.Result.IsError, "%s", done.Result.StructuredContent)
	require.Contains(t, string(done.Result.StructuredContent), `"state":"succeeded"`)
	require.NotNil(t, done.TTLMs)
	var intents int
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.table("outbox_intent")).Scan(&intents))
	require.Equal(t, 1, intents, "every call was one intent")
	got, err := e.client.Get(context.Background(), "", "task-1")
	require.NoError(t, err)
	require.Equal(t, 1, got.Attempts, "one attempt: one charge")

	t.Run("OverStdio", func(t *testing.T) {
		cmd := exec.Command(outboxd(t), "mcp")
		cmd.Env = e.vars
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = stdin.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		c := mcpraw.Stdio(stdin, stdout)
		c.Tasks = true
		// The task of the intent made over HTTP: the same id over stdio
		// (one namespace), and its stored result.
		require.Equal(t, "completed", c.GetTask(t, task.TaskID).Status)
		held := c.CallTask(t, "charge_card", map[string]any{"amount": 10, "currency": "usd", "customer": "cus_s",
			"idempotency_key": "task-stdio", "require_approval": true})
		require.Equal(t, "working", c3.GetTask(t, held.TaskID).Status, "a stdio task polled over HTTP")
		listen := c.Listen(t, map[string]any{"taskIds": []string{held.TaskID}})
		agreed, _ := listen.Ack(t)
		require.Equal(t, []string{held.TaskID}, agreed)
		require.Equal(t, "working", listen.NextTask(t).Status)
		require.Nil(t, c.Do(t, "tasks/cancel", map[string]any{"taskId": held.TaskID}).Error)
		require.Equal(t, "cancelled", listen.NextTask(t).Status)
		listen.RequireEnd(t)
		require.Equal(t, "cancelled", c.GetTask(t, held.TaskID).Status)
		// Without the extension declared, a listen for tasks is refused.
		c.Tasks = false
		refused := c.Listen(t, map[string]any{"taskIds": []string{held.TaskID}})
		mcpraw.RequireError(t, &refused.Next(t).Response, -32021)
		// Nor is tasks/get.
		mcpraw.RequireError(t, c.Do(t, "tasks/get", map[string]any{"taskId": held.TaskID}), -32021)
	})
}

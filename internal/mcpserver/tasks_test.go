package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/mcpraw"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// serveHTTP serves an MCP server of namespace over stateless streamable
// HTTP, as serve's /mcp does; a bearer token names the caller (its
// TokenInfo's UserID) with role agent, or role reader when it starts with
// "reader".
func (b *testBundle) serveHTTP(t testing.TB, config *mcpserver.Config) string {
	t.Helper()
	server, err := mcpserver.New(b.pool, b.client, config)
	require.NoError(t, err)
	getServer := func(*http.Request) *mcp.Server { return server }
	h := mcpserver.ListenHandler(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Stateless: true}), getServer, nil)
	withToken := auth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		role := "agent"
		if strings.HasPrefix(token, "reader") {
			role = "reader"
		}
		return &auth.TokenInfo{UserID: token, Scopes: []string{role}, Expiration: time.Now().Add(time.Hour)}, nil
	}, nil)(h)
	srv := httptest.NewServer(withToken)
	t.Cleanup(srv.Close)
	return srv.URL
}

// setIntentState moves an intent where no test may drive it through a
// provider (unknown, failed) in one statement.
func (b *testBundle) setIntentState(t *testing.T, key, state, errJSON string) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), fmt.Sprintf(`UPDATE %q.outbox_intent SET state = $2, error = $3::jsonb,
		completed_at = CASE WHEN $2 IN ('failed', 'succeeded', 'cancelled') THEN now() END WHERE key = $1`, b.schema),
		key, state, errJSON)
	require.NoError(t, err)
}

func TestMCPTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Two replicas of one namespace, and a server of another namespace.
	var (
		mu       sync.Mutex
		outcomes = map[string]int{}
	)
	url1 := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop", TaskFunc: func(outcome string) {
		mu.Lock()
		outcomes[outcome]++
		mu.Unlock()
	}})
	url2 := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop"})
	urlOther := b.serveHTTP(t, &mcpserver.Config{Namespace: "other"})
	c1 := &mcpraw.Client{URL: url1, Token: "agent-1", Tasks: true}
	c2 := &mcpraw.Client{URL: url2, Token: "agent-1", Tasks: true}
	other := &mcpraw.Client{URL: urlOther, Token: "agent-2", Tasks: true}
	charge := map[string]any{"amount": 1500, "currency": "usd", "customer": "cus_1", "idempotency_key": "order-1"}

	// No dispatcher runs yet: the intent stays pending, and the call is
	// answered with a task once the intent is committed.
	first := c1.CallTask(t, "charge_card", charge)
	require.Equal(t, "working", first.Status)
	require.Equal(t, "queued", first.StatusMessage)
	require.Nil(t, first.TTLMs, "unlimited until the intent ends")
	require.EqualValues(t, 1000, first.PollIntervalMs)
	require.Len(t, first.TaskID, 32, "24 bytes, base64url: a 128-bit MAC and the intent's id")

	t.Run("Counted", func(t *testing.T) {
		// outbox_mcp_tasks_total: a new task, then one joined.
		c1.CallTask(t, "charge_card", charge)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string]int{mcpserver.TaskCreated: 1, mcpserver.TaskJoined: 1}, outcomes)
	})

	t.Run("ReissuedCallsJoinTheTask", func(t *testing.T) {
		// The same key under a new request id, on another replica.
		again := c2.CallTask(t, "charge_card", charge)
		require.Equal(t, first.TaskID, again.TaskID)
		// A call without a key: the automatic key makes two identical
		// calls one action, and so one task.
		keyless := map[string]any{"amount": 900, "currency": "usd", "customer": "cus_9"}
		a := c1.CallTask(t, "charge_card", keyless)
		bb := c2.CallTask(t, "charge_card", keyless)
		require.Equal(t, a.TaskID, bb.TaskID)
		require.NotEqual(t, first.TaskID, a.TaskID)
	})

	t.Run("OtherNamespaceSeesNoTask", func(t *testing.T) {
		mcpraw.RequireError(t, other.Do(t, "tasks/get", map[string]any{"taskId": first.TaskID}), -32602)
		mcpraw.RequireError(t, other.Do(t, "tasks/cancel", map[string]any{"taskId": first.TaskID}), -32602)
		mcpraw.RequireError(t, other.Do(t, "tasks/update", map[string]any{"taskId": first.TaskID, "inputResponses": map[string]any{}}), -32602)
		// A forged id (another intent id, a MAC not the server's) neither.
		mcpraw.RequireError(t, c1.Do(t, "tasks/get", map[string]any{"taskId": "AAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAA"}), -32602)
		// The cancel was refused as for a task that does not exist: the
		// intent is still pending.
		intent, err := b.client.Get(t.Context(), "shop", "order-1")
		require.NoError(t, err)
		require.Equal(t, outbox.StatePending, intent.State)
	})

	t.Run("UndeclaredClients", func(t *testing.T) {
		plain := &mcpraw.Client{URL: url1, Token: "agent-1"}
		mcpraw.RequireError(t, plain.Do(t, "tasks/get", map[string]any{"taskId": first.TaskID}), -32021)
		// A call of a client without the extension is answered as
		// before: the intent, pending.
		resp := plain.Do(t, "tools/call", map[string]any{"name": "charge_card", "arguments": charge})
		require.Nil(t, resp.Error)
		var res struct {
			ResultType        string `json:"resultType"`
			StructuredContent struct {
				State     string `json:"state"`
				Duplicate bool   `json:"duplicate"`
			} `json:"structuredContent"`
		}
		require.NoError(t, json.Unmarshal(resp.Result, &res))
		require.Equal(t, "complete", res.ResultType)
		require.Equal(t, "pending", res.StructuredContent.State)
		require.True(t, res.StructuredContent.Duplicate)
	})

	t.Run("CancelWhilePending", func(t *testing.T) {
		task := c1.CallTask(t, "charge_card", map[string]any{"amount": 100, "currency": "usd", "customer": "cus_c", "idempotency_key": "to-cancel"})
		resp := c2.Do(t, "tasks/cancel", map[string]any{"taskId": task.TaskID})
		require.Nil(t, resp.Error)
		got := c1.GetTask(t, task.TaskID)
		require.Equal(t, "cancelled", got.Status)
		require.Contains(t, got.StatusMessage, "cancelled")
		require.NotNil(t, got.TTLMs)
	})

	t.Run("UnknownStaysWorking", func(t *testing.T) {
		task := c1.CallTask(t, "charge_card", map[string]any{"amount": 200, "currency": "usd", "customer": "cus_u", "idempotency_key": "lost"})
		b.setIntentState(t, "lost", "unknown", `{"code": "ambiguous", "message": "timed out after the send"}`)
		got := c2.GetTask(t, task.TaskID)
		require.Equal(t, "working", got.Status)
		require.Contains(t, got.StatusMessage, "do not retry")
		require.EqualValues(t, 60000, got.PollIntervalMs)
		require.Nil(t, got.TTLMs)
		// Once sent, a cancel is refused by outbox's rule; the
		// acknowledgement is empty all the same.
		require.Nil(t, c1.Do(t, "tasks/cancel", map[string]any{"taskId": task.TaskID}).Error)
		require.Equal(t, "working", c1.GetTask(t, task.TaskID).Status)
	})

	t.Run("FailedIsCompletedWithIsError", func(t *testing.T) {
		task := c1.CallTask(t, "charge_card", map[string]any{"amount": 300, "currency": "usd", "customer": "cus_f", "idempotency_key": "declined"})
		b.setIntentState(t, "declined", "failed", `{"code": "card_declined", "message": "the card was declined"}`)
		got := c2.GetTask(t, task.TaskID)
		require.Equal(t, "completed", got.Status)
		require.NotNil(t, got.Result)
		require.True(t, got.Result.IsError)
		require.Contains(t, got.Result.Content[0].Text, "card_declined")
		require.NotNil(t, got.TTLMs)
		require.Greater(t, *got.TTLMs, int64(0))
	})

	t.Run("OperatorApprovalWorking", func(t *testing.T) {
		task := c1.CallTask(t, "charge_card", map[string]any{"amount": 400, "currency": "usd", "customer": "cus_a",
			"idempotency_key": "held", "require_approval": true})
		got := c2.GetTask(t, task.TaskID)
		require.Equal(t, "working", got.Status)
		require.Contains(t, got.StatusMessage, "an operator decides")
		require.GreaterOrEqual(t, got.PollIntervalMs, int64(30000))
		require.Empty(t, got.InputRequests)
	})

	t.Run("CompletedOnAnotherReplica", func(t *testing.T) {
		// The effects run: the task completes with the result a call
		// within the wait gets, on the replica that did not create it.
		testrun.Dispatcher(t, b.pool, &dispatcher.Config{Effects: b.registry, Schema: b.schema})
		var got *mcpraw.Task
		require.Eventually(t, func() bool {
			got = c2.GetTask(t, first.TaskID)
			return got.Status == "completed"
		}, 20*time.Second, 50*time.Millisecond)
		require.False(t, got.Result.IsError)
		var answer struct {
			State string `json:"state"`
			Key   string `json:"key"`
		}
		require.NoError(t, json.Unmarshal(got.Result.StructuredContent, &answer))
		require.Equal(t, "succeeded", answer.State)
		require.Equal(t, "order-1", answer.Key)
		// A duplicate after the end is answered with the stored result,
		// not a task.
		resp := c1.Do(t, "tools/call", map[string]any{"name": "charge_card", "arguments": charge})
		require.Nil(t, resp.Error)
		require.Contains(t, string(resp.Result), `"resultType":"complete"`)
		require.Contains(t, string(resp.Result), `"succeeded"`)
	})
}

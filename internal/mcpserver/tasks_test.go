package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// rawClient is an MCP client written from the 2026-07-28 specification
// and the tasks extension (SEP-2663), speaking JSON-RPC over streamable
// HTTP statelessly: each request carries its protocol version, client
// info and capabilities in params._meta, and a fresh request id.
type rawClient struct {
	url   string
	token string
	// tasks declares the tasks extension; elicit declares form
	// elicitation.
	tasks, elicit bool
	ids           atomic.Int64
}

// rpcResponse is a JSON-RPC response.
type rpcResponse struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (c *rawClient) meta() map[string]any {
	caps := map[string]any{}
	if c.tasks {
		caps["extensions"] = map[string]any{mcpserver.TasksExtension: map[string]any{}}
	}
	if c.elicit {
		caps["elicitation"] = map[string]any{"form": map[string]any{}}
	}
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw-host", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
}

// do sends method with params (to which _meta is added) and returns the
// response.
func (c *rawClient) do(t *testing.T, method string, params map[string]any) *rpcResponse {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = c.meta()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.ids.Add(1), "method": method, "params": params})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, c.url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok && method == "tools/call" {
		req.Header.Set("Mcp-Name", name)
	}
	if id, ok := params["taskId"].(string); ok {
		// The extension's routing header.
		req.Header.Set("Mcp-Name", id)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	// 2026-07-28 answers a request's JSON-RPC error with an HTTP status
	// of its own (400 for invalid params), the body the JSON-RPC error.
	require.Contains(t, []int{http.StatusOK, http.StatusBadRequest}, resp.StatusCode)
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var probe struct {
					ID json.RawMessage `json:"id"`
				}
				if json.Unmarshal([]byte(data), &probe) == nil && len(probe.ID) > 0 {
					raw = []byte(data)
					break
				}
			}
		}
	} else {
		var buf bytes.Buffer
		_, err = buf.ReadFrom(resp.Body)
		require.NoError(t, err)
		raw = buf.Bytes()
	}
	var out rpcResponse
	require.NoError(t, json.Unmarshal(raw, &out), "response: %s", raw)
	return &out
}

// wireTask is a task as the extension shapes it on the wire.
type wireTask struct {
	ResultType     string                     `json:"resultType"`
	TaskID         string                     `json:"taskId"`
	Status         string                     `json:"status"`
	StatusMessage  string                     `json:"statusMessage"`
	CreatedAt      string                     `json:"createdAt"`
	LastUpdatedAt  string                     `json:"lastUpdatedAt"`
	TTLMs          *int64                     `json:"ttlMs"`
	PollIntervalMs int64                      `json:"pollIntervalMs"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests"`
	Result         *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
}

// callTask calls tool and requires a task back.
func (c *rawClient) callTask(t *testing.T, tool string, args map[string]any) *wireTask {
	t.Helper()
	resp := c.do(t, "tools/call", map[string]any{"name": tool, "arguments": args})
	require.Nil(t, resp.Error)
	var task wireTask
	require.NoError(t, json.Unmarshal(resp.Result, &task))
	require.Equal(t, "task", task.ResultType, "result: %s", resp.Result)
	require.NotEmpty(t, task.TaskID)
	return &task
}

func (c *rawClient) getTask(t *testing.T, id string) *wireTask {
	t.Helper()
	resp := c.do(t, "tasks/get", map[string]any{"taskId": id})
	require.Nil(t, resp.Error, "tasks/get: %s", resp.Result)
	var task wireTask
	require.NoError(t, json.Unmarshal(resp.Result, &task))
	require.Equal(t, "complete", task.ResultType)
	require.Equal(t, id, task.TaskID)
	return &task
}

// rpcError requires resp to be the JSON-RPC error code.
func rpcError(t *testing.T, resp *rpcResponse, code int) {
	t.Helper()
	require.NotNil(t, resp.Error, "expected error %d, got result %s", code, resp.Result)
	require.Equal(t, code, resp.Error.Code, resp.Error.Message)
}

// serveHTTP serves an MCP server of namespace over stateless streamable
// HTTP, as serve's /mcp does; a bearer token names the caller (its
// TokenInfo's UserID) with role agent, or role reader when it starts with
// "reader".
func (b *testBundle) serveHTTP(t *testing.T, config *mcpserver.Config) string {
	t.Helper()
	server, err := mcpserver.New(b.pool, b.client, config)
	require.NoError(t, err)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true})
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
	url1 := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop"})
	url2 := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop"})
	urlOther := b.serveHTTP(t, &mcpserver.Config{Namespace: "other"})
	c1 := &rawClient{url: url1, token: "agent-1", tasks: true}
	c2 := &rawClient{url: url2, token: "agent-1", tasks: true}
	other := &rawClient{url: urlOther, token: "agent-2", tasks: true}
	charge := map[string]any{"amount": 1500, "currency": "usd", "customer": "cus_1", "idempotency_key": "order-1"}

	// No dispatcher runs yet: the intent stays pending, and the call is
	// answered with a task once the intent is committed.
	first := c1.callTask(t, "charge_card", charge)
	require.Equal(t, "working", first.Status)
	require.Equal(t, "queued", first.StatusMessage)
	require.Nil(t, first.TTLMs, "unlimited until the intent ends")
	require.EqualValues(t, 1000, first.PollIntervalMs)
	require.Len(t, first.TaskID, 32, "24 bytes, base64url: the intent's id and a 128-bit MAC")

	t.Run("ReissuedCallsJoinTheTask", func(t *testing.T) {
		// The same key under a new request id, on another replica.
		again := c2.callTask(t, "charge_card", charge)
		require.Equal(t, first.TaskID, again.TaskID)
		// A call without a key: the automatic key makes two identical
		// calls one action, and so one task.
		keyless := map[string]any{"amount": 900, "currency": "usd", "customer": "cus_9"}
		a := c1.callTask(t, "charge_card", keyless)
		bb := c2.callTask(t, "charge_card", keyless)
		require.Equal(t, a.TaskID, bb.TaskID)
		require.NotEqual(t, first.TaskID, a.TaskID)
	})

	t.Run("OtherNamespaceSeesNoTask", func(t *testing.T) {
		rpcError(t, other.do(t, "tasks/get", map[string]any{"taskId": first.TaskID}), -32602)
		rpcError(t, other.do(t, "tasks/cancel", map[string]any{"taskId": first.TaskID}), -32602)
		rpcError(t, other.do(t, "tasks/update", map[string]any{"taskId": first.TaskID, "inputResponses": map[string]any{}}), -32602)
		// A forged id (another intent id, a MAC not the server's) neither.
		rpcError(t, c1.do(t, "tasks/get", map[string]any{"taskId": "AAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAA"}), -32602)
		// The cancel was refused as for a task that does not exist: the
		// intent is still pending.
		intent, err := b.client.Get(t.Context(), "shop", "order-1")
		require.NoError(t, err)
		require.Equal(t, outbox.StatePending, intent.State)
	})

	t.Run("UndeclaredClients", func(t *testing.T) {
		plain := &rawClient{url: url1, token: "agent-1"}
		rpcError(t, plain.do(t, "tasks/get", map[string]any{"taskId": first.TaskID}), -32021)
		// A call of a client without the extension is answered as
		// before: the intent, pending.
		resp := plain.do(t, "tools/call", map[string]any{"name": "charge_card", "arguments": charge})
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
		task := c1.callTask(t, "charge_card", map[string]any{"amount": 100, "currency": "usd", "customer": "cus_c", "idempotency_key": "to-cancel"})
		resp := c2.do(t, "tasks/cancel", map[string]any{"taskId": task.TaskID})
		require.Nil(t, resp.Error)
		got := c1.getTask(t, task.TaskID)
		require.Equal(t, "cancelled", got.Status)
		require.Contains(t, got.StatusMessage, "cancelled")
		require.NotNil(t, got.TTLMs)
	})

	t.Run("UnknownStaysWorking", func(t *testing.T) {
		task := c1.callTask(t, "charge_card", map[string]any{"amount": 200, "currency": "usd", "customer": "cus_u", "idempotency_key": "lost"})
		b.setIntentState(t, "lost", "unknown", `{"code": "ambiguous", "message": "timed out after the send"}`)
		got := c2.getTask(t, task.TaskID)
		require.Equal(t, "working", got.Status)
		require.Contains(t, got.StatusMessage, "do not retry")
		require.EqualValues(t, 60000, got.PollIntervalMs)
		require.Nil(t, got.TTLMs)
		// Once sent, a cancel is refused by outbox's rule; the
		// acknowledgement is empty all the same.
		require.Nil(t, c1.do(t, "tasks/cancel", map[string]any{"taskId": task.TaskID}).Error)
		require.Equal(t, "working", c1.getTask(t, task.TaskID).Status)
	})

	t.Run("FailedIsCompletedWithIsError", func(t *testing.T) {
		task := c1.callTask(t, "charge_card", map[string]any{"amount": 300, "currency": "usd", "customer": "cus_f", "idempotency_key": "declined"})
		b.setIntentState(t, "declined", "failed", `{"code": "card_declined", "message": "the card was declined"}`)
		got := c2.getTask(t, task.TaskID)
		require.Equal(t, "completed", got.Status)
		require.NotNil(t, got.Result)
		require.True(t, got.Result.IsError)
		require.Contains(t, got.Result.Content[0].Text, "card_declined")
		require.NotNil(t, got.TTLMs)
		require.Greater(t, *got.TTLMs, int64(0))
	})

	t.Run("OperatorApprovalWorking", func(t *testing.T) {
		task := c1.callTask(t, "charge_card", map[string]any{"amount": 400, "currency": "usd", "customer": "cus_a",
			"idempotency_key": "held", "require_approval": true})
		got := c2.getTask(t, task.TaskID)
		require.Equal(t, "working", got.Status)
		require.Contains(t, got.StatusMessage, "an operator decides")
		require.GreaterOrEqual(t, got.PollIntervalMs, int64(30000))
		require.Empty(t, got.InputRequests)
	})

	t.Run("CompletedOnAnotherReplica", func(t *testing.T) {
		// The effects run: the task completes with the result a call
		// within the wait gets, on the replica that did not create it.
		testrun.Dispatcher(t, b.pool, &dispatcher.Config{Effects: b.registry, Schema: b.schema})
		var got *wireTask
		require.Eventually(t, func() bool {
			got = c2.getTask(t, first.TaskID)
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
		resp := c1.do(t, "tools/call", map[string]any{"name": "charge_card", "arguments": charge})
		require.Nil(t, resp.Error)
		require.Contains(t, string(resp.Result), `"resultType":"complete"`)
		require.Contains(t, string(resp.Result), `"succeeded"`)
	})
}

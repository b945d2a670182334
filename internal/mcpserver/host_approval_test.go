package mcpserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/mcpraw"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/outbox"
)

// inputRequired is an MRTR input_required answer.
type inputRequired struct {
	ResultType    string `json:"resultType"`
	InputRequests map[string]struct {
		Method string `json:"method"`
		Params struct {
			Mode            string         `json:"mode"`
			Message         string         `json:"message"`
			RequestedSchema map[string]any `json:"requestedSchema"`
		} `json:"params"`
	} `json:"inputRequests"`
	RequestState string `json:"requestState"`
}

// ask calls tool and requires an input_required answer with one
// elicitation, whose id it returns with the answer.
func ask(t *testing.T, c *mcpraw.Client, tool string, args map[string]any) (*inputRequired, string) {
	t.Helper()
	resp := c.Do(t, "tools/call", map[string]any{"name": tool, "arguments": args})
	require.Nil(t, resp.Error)
	var ir inputRequired
	require.NoError(t, json.Unmarshal(resp.Result, &ir), "%s", resp.Result)
	require.Equal(t, "input_required", ir.ResultType, "%s", resp.Result)
	require.Len(t, ir.InputRequests, 1)
	require.NotEmpty(t, ir.RequestState)
	for id, req := range ir.InputRequests {
		require.Equal(t, "elicitation/create", req.Method)
		require.Equal(t, "form", req.Params.Mode)
		return &ir, id
	}
	panic("unreachable")
}

// answer retries tool with an answer to the input request id under state,
// and returns the tool result's raw JSON and whether it is a tool error.
func answerHost(t *testing.T, c *mcpraw.Client, tool string, args map[string]any, state, id string, response map[string]any) (string, bool) {
	t.Helper()
	resp := c.Do(t, "tools/call", map[string]any{"name": tool, "arguments": args,
		"requestState": state, "inputResponses": map[string]any{id: response}})
	require.Nil(t, resp.Error)
	var res struct {
		IsError bool `json:"isError"`
	}
	require.NoError(t, json.Unmarshal(resp.Result, &res))
	return string(resp.Result), res.IsError
}

func approve(reason string) map[string]any {
	return map[string]any{"action": "accept", "content": map[string]any{"decision": "approve", "reason": reason}}
}

func TestMCPHostApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Charges of 1000 or more: the person at the host may decide.
	// Emails: only operators.
	require.NoError(t, b.client.SetApprovalRules(t.Context(), []outbox.ApprovalRule{
		{Effect: "charge", Arg: "amount", Op: ">=", Value: "1000", Host: true},
		{Effect: "email"},
	}))
	var approvals []string
	url1 := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop", ApprovalFunc: func(via, d string) { approvals = append(approvals, via+"/"+d) }})
	url2 := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop"})
	host := &mcpraw.Client{URL: url1, Token: "agent-1", Elicit: true}
	hostOn2 := &mcpraw.Client{URL: url2, Token: "agent-1", Elicit: true}
	intruder := &mcpraw.Client{URL: url1, Token: "agent-2", Elicit: true}
	countIntents := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM "`+b.schema+`".outbox_intent`).Scan(&n))
		return n
	}
	intent := func(key string) *outbox.Intent {
		got, err := b.client.Get(t.Context(), "shop", key)
		require.NoError(t, err)
		return got
	}

	t.Run("ApprovedThroughMRTR", func(t *testing.T) {
		args := map[string]any{"amount": 5000, "currency": "usd", "customer": "cus_1", "idempotency_key": "big-1"}
		ir, id := ask(t, host, "charge_card", args)
		msg := ir.InputRequests[id].Params.Message
		require.Contains(t, msg, "charge_card")
		require.Contains(t, msg, intent("big-1").ArgsSHA256)
		require.Contains(t, msg, "charge:amount>=1000")
		require.Contains(t, msg, "expires: ")
		// Nothing in the state is readable.
		require.NotContains(t, ir.RequestState, "big-1")
		n := countIntents()

		// Refusals write nothing and leave it awaiting.
		t.Run("Tampered", func(t *testing.T) {
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(ir.RequestState, "v1."))
			require.NoError(t, err)
			raw[len(raw)-1] ^= 1
			out, isErr := answerHost(t, host, "charge_card", args, "v1."+base64.RawURLEncoding.EncodeToString(raw), id, approve(""))
			require.True(t, isErr)
			require.Contains(t, out, "invalid_request_state")
		})
		t.Run("OtherPrincipal", func(t *testing.T) {
			out, isErr := answerHost(t, intruder, "charge_card", args, ir.RequestState, id, approve(""))
			require.True(t, isErr)
			require.Contains(t, out, "another caller")
		})
		t.Run("ChangedArguments", func(t *testing.T) {
			// Without a key, so that other arguments would be a new
			// intent: refused before anything is written.
			changed := map[string]any{"amount": 9000, "currency": "usd", "customer": "cus_1"}
			out, isErr := answerHost(t, host, "charge_card", changed, ir.RequestState, id, approve(""))
			require.True(t, isErr)
			require.Contains(t, out, "other arguments")
		})
		require.Equal(t, n, countIntents(), "a refused state writes nothing")
		require.Equal(t, outbox.StateAwaitingApproval, intent("big-1").State)

		out, isErr := answerHost(t, host, "charge_card", args, ir.RequestState, id, approve("looks right"))
		require.False(t, isErr, out)
		require.Contains(t, out, `"state":"pending"`)
		got := intent("big-1")
		require.Equal(t, outbox.StatePending, got.State)
		require.NotNil(t, got.ApprovedBy)
		require.Equal(t, "host mcp:raw-host api:agent-1", *got.ApprovedBy)
		require.Equal(t, "looks right", *got.ApprovalNote)
		require.Equal(t, []string{"host/approved"}, approvals)

		t.Run("ReplayedOnSameAndOtherReplica", func(t *testing.T) {
			for _, c := range []*mcpraw.Client{host, hostOn2} {
				out, isErr := answerHost(t, c, "charge_card", args, ir.RequestState, id, approve(""))
				require.True(t, isErr)
				require.Contains(t, out, "answered already")
			}
		})
	})

	t.Run("DeclineLeavesItAwaiting", func(t *testing.T) {
		args := map[string]any{"amount": 2000, "currency": "usd", "customer": "cus_2", "idempotency_key": "big-2"}
		ir, id := ask(t, host, "charge_card", args)
		out, isErr := answerHost(t, host, "charge_card", args, ir.RequestState, id, map[string]any{"action": "decline"})
		require.False(t, isErr, out)
		require.Contains(t, out, `"state":"awaiting_approval"`)
		require.Equal(t, outbox.StateAwaitingApproval, intent("big-2").State)
		// Asked again, under another request id.
		_, id2 := ask(t, host, "charge_card", args)
		require.NotEqual(t, id, id2)
		// Denied from the host.
		ir3, id3 := ask(t, host, "charge_card", args)
		out, isErr = answerHost(t, host, "charge_card", args, ir3.RequestState, id3,
			map[string]any{"action": "accept", "content": map[string]any{"decision": "deny", "reason": "wrong customer"}})
		require.False(t, isErr, out)
		got := intent("big-2")
		require.Equal(t, outbox.StateCancelled, got.State)
		require.Equal(t, "approval_denied", got.Error.Code)
		require.Equal(t, "wrong customer", got.Error.Message)
	})

	t.Run("Expired", func(t *testing.T) {
		// An approval that expires in a second: its state expires with it.
		urlShort := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop", ApprovalTTL: time.Second})
		c := &mcpraw.Client{URL: urlShort, Token: "agent-1", Elicit: true}
		args := map[string]any{"amount": 3000, "currency": "usd", "customer": "cus_3", "idempotency_key": "big-3"}
		ir, id := ask(t, c, "charge_card", args)
		// Answered after the expiry (the clock is the condition).
		expires := intent("big-3").CreatedAt.Add(time.Second)
		require.Eventually(t, func() bool { return time.Now().After(expires.Add(50 * time.Millisecond)) }, 5*time.Second, 20*time.Millisecond)
		out, isErr := answerHost(t, c, "charge_card", args, ir.RequestState, id, approve(""))
		require.True(t, isErr, "an expired state approves nothing: %s", out)
		require.Contains(t, out, "has expired")
		require.Equal(t, outbox.StateAwaitingApproval, intent("big-3").State)
	})

	t.Run("OperatorRuleNotAsked", func(t *testing.T) {
		resp := host.Do(t, "tools/call", map[string]any{"name": "send_email", "arguments": map[string]any{
			"to": []string{"a@example.com"}, "subject": "hi", "text": "hello", "idempotency_key": "mail-1"}})
		require.Nil(t, resp.Error)
		require.NotContains(t, string(resp.Result), "input_required")
		require.Contains(t, string(resp.Result), "awaiting_approval")
	})

	t.Run("OperatorRuleOpensTheConsole", func(t *testing.T) {
		// With a public URL, a client that declares URL-mode elicitation
		// is handed the console's page of an intent only an operator
		// approves; the retried call reads what the operator decided.
		urlServer := b.serveHTTP(t, &mcpserver.Config{Namespace: "shop", PublicURL: "https://outbox.example.com/",
			ApprovalFunc: func(via, d string) { approvals = append(approvals, via+"/"+d) }})
		browser := &mcpraw.Client{URL: urlServer, Token: "agent-1", Elicit: true, ElicitURL: true}
		args := map[string]any{"to": []string{"b@example.com"}, "subject": "hi", "text": "hello", "idempotency_key": "mail/2"}
		resp := browser.Do(t, "tools/call", map[string]any{"name": "send_email", "arguments": args})
		require.Nil(t, resp.Error)
		var ir struct {
			ResultType    string `json:"resultType"`
			InputRequests map[string]struct {
				Method string `json:"method"`
				Params struct {
					Mode          string `json:"mode"`
					Message       string `json:"message"`
					URL           string `json:"url"`
					ElicitationID string `json:"elicitationId"`
				} `json:"params"`
			} `json:"inputRequests"`
			RequestState string `json:"requestState"`
		}
		require.NoError(t, json.Unmarshal(resp.Result, &ir), "%s", resp.Result)
		require.Equal(t, "input_required", ir.ResultType, "%s", resp.Result)
		require.Len(t, ir.InputRequests, 1)
		var id string
		for k, req := range ir.InputRequests {
			id = k
			require.Equal(t, "elicitation/create", req.Method)
			require.Equal(t, "url", req.Params.Mode)
			require.Equal(t, "https://outbox.example.com/console/intents/shop/mail%2F2", req.Params.URL)
			require.Equal(t, k, req.Params.ElicitationID)
			require.Contains(t, req.Params.Message, "An operator must approve send_email")
			require.Contains(t, req.Params.Message, intent("mail/2").ArgsSHA256)
		}
		// A form-only client is not handed the page, nor is one of a
		// server without a public URL.
		resp = host.Do(t, "tools/call", map[string]any{"name": "send_email", "arguments": args})
		require.NotContains(t, string(resp.Result), "input_required")
		resp = (&mcpraw.Client{URL: url1, Token: "agent-1", Elicit: true, ElicitURL: true}).Do(t, "tools/call", map[string]any{"name": "send_email", "arguments": args})
		require.NotContains(t, string(resp.Result), "input_required")

		// The host opened the page; nothing is decided by the answer.
		before := len(approvals)
		out, isErr := answerHost(t, browser, "send_email", args, ir.RequestState, id, map[string]any{"action": "accept"})
		require.False(t, isErr, out)
		require.Contains(t, out, "awaiting_approval")
		require.Equal(t, outbox.StateAwaitingApproval, intent("mail/2").State)
		require.Len(t, approvals, before, "opening the page is no approval")
		// The state was used: a replay is refused.
		out, isErr = answerHost(t, browser, "send_email", args, ir.RequestState, id, map[string]any{"action": "accept"})
		require.True(t, isErr)
		require.Contains(t, out, "invalid_request_state")

		// An operator approves in the console; the call retried reads it.
		_, err := b.client.Approve(t.Context(), &outbox.ApprovalParams{Namespace: "shop", Key: "mail/2", By: "operator:ana", ArgsSHA256: intent("mail/2").ArgsSHA256})
		require.NoError(t, err)
		resp = browser.Do(t, "tools/call", map[string]any{"name": "send_email", "arguments": args})
		require.Nil(t, resp.Error)
		require.NotContains(t, string(resp.Result), "input_required")
		require.NotContains(t, string(resp.Result), "awaiting_approval")
	})

	t.Run("RequestedByTheCallerForTheHost", func(t *testing.T) {
		args := map[string]any{"amount": 10, "currency": "usd", "customer": "cus_4", "idempotency_key": "small", "require_approval": "host"}
		_, _ = ask(t, host, "charge_card", args)
		require.Equal(t, outbox.ApprovalRequestedHost, *intent("small").ApprovalRule)
		// require_approval true stays the operators'.
		resp := host.Do(t, "tools/call", map[string]any{"name": "charge_card", "arguments": map[string]any{
			"amount": 11, "currency": "usd", "customer": "cus_4", "idempotency_key": "small-op", "require_approval": true}})
		require.NotContains(t, string(resp.Result), "input_required")
	})

	t.Run("ApprovedThroughTasksUpdate", func(t *testing.T) {
		c := &mcpraw.Client{URL: url1, Token: "agent-1", Elicit: true, Tasks: true}
		args := map[string]any{"amount": 7000, "currency": "usd", "customer": "cus_5", "idempotency_key": "big-5"}
		task := c.CallTask(t, "charge_card", args)
		require.Equal(t, "input_required", task.Status)
		got := c.GetTask(t, task.TaskID)
		require.Equal(t, "input_required", got.Status)
		require.Len(t, got.InputRequests, 1)
		var id string
		for k := range got.InputRequests {
			id = k
		}
		// The same request under the same key on every poll, on any
		// replica.
		c2 := &mcpraw.Client{URL: url2, Token: "agent-1", Elicit: true, Tasks: true}
		require.Contains(t, c2.GetTask(t, task.TaskID).InputRequests, id)
		// Another token's answer is ignored (its key is not outstanding
		// for it).
		require.Nil(t, (&mcpraw.Client{URL: url1, Token: "agent-2", Elicit: true, Tasks: true}).Do(t, "tasks/update",
			map[string]any{"taskId": task.TaskID, "inputResponses": map[string]any{id: approve("")}}).Error)
		require.Equal(t, outbox.StateAwaitingApproval, intent("big-5").State)
		// A reader may not answer.
		reader := &mcpraw.Client{URL: url1, Token: "reader-1", Elicit: true, Tasks: true}
		require.NotNil(t, reader.Do(t, "tasks/update", map[string]any{"taskId": task.TaskID, "inputResponses": map[string]any{id: approve("")}}).Error)

		require.Nil(t, c2.Do(t, "tasks/update", map[string]any{"taskId": task.TaskID, "inputResponses": map[string]any{id: approve("ok")}}).Error)
		require.Equal(t, outbox.StatePending, intent("big-5").State)
		require.Equal(t, "working", c.GetTask(t, task.TaskID).Status)
	})

	t.Run("GoSDKClient", func(t *testing.T) {
		// The official Go SDK's client, which speaks 2026-07-28 and
		// fulfils input requests itself, approving from its elicitation
		// handler.
		var asked string
		client := mcp.NewClient(&mcp.Implementation{Name: "go-host", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked = req.Params.Message
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}, nil
			},
		})
		cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url1, HTTPClient: tokenClient("agent-1")}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card",
			Arguments: map[string]any{"amount": 1234, "currency": "usd", "customer": "cus_6", "idempotency_key": "big-6"}})
		require.NoError(t, err)
		require.False(t, res.IsError, text(res))
		require.Contains(t, asked, "charge_card")
		got := intent("big-6")
		require.Equal(t, outbox.StatePending, got.State)
		require.Equal(t, "host mcp:go-host api:agent-1", *got.ApprovedBy)
	})
}

// tokenClient is an HTTP client that sends token as a bearer token.
func tokenClient(token string) *http.Client {
	return &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

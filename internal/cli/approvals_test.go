package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// TestServeApprovals runs serve with an approval rule: an agent's charge
// above the limit waits; no agent can approve it, over HTTP or MCP; an
// operator's approval with other arguments' hash releases nothing, the
// right one releases it; the command line approves and denies too; the
// metrics count it.
func TestServeApprovals(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	const agent, operator = "agent-token-01234567", "operator-token-01234"
	env := with(bundle.env,
		"OUTBOX_API_TOKENS", agent+":team-a,"+operator+":team-a:operator",
		"OUTBOX_APPROVAL", "noop:amount>=10000,charge:amount>=10000")
	srv := testrun.Serve(t, env)
	call := func(token, method, path, key, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+srv.Addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	intentOf := func(body string) *outbox.Intent {
		t.Helper()
		var i outbox.Intent
		require.NoError(t, json.Unmarshal([]byte(body), &i), body)
		return &i
	}

	status, body := call(agent, "POST", "/v1/intents", "big-1", `{"effect": "noop", "args": {"amount": 25000}}`)
	require.Equal(t, http.StatusCreated, status, body)
	big := intentOf(body)
	require.Equal(t, outbox.StateAwaitingApproval, big.State)
	require.Equal(t, "noop:amount>=10000", *big.ApprovalRule)
	status, body = call(agent, "POST", "/v1/intents", "small-1", `{"effect": "noop", "args": {"amount": 10}}`)
	require.Equal(t, http.StatusCreated, status, body)
	require.Equal(t, outbox.StatePending, intentOf(body).State)

	approve := `{"args_sha256": "` + big.ArgsSHA256 + `"}`
	for _, path := range []string{"/v1/intents/big-1/approve", "/v1/intents/big-1/deny"} {
		status, body = call(agent, "POST", path, "", approve)
		require.Equal(t, http.StatusForbidden, status, body)
		require.Contains(t, body, "requires the role operator")
	}

	// MCP: the agent's charge waits too, the answer says what to do, and
	// no tool approves.
	transport := &mcp.StreamableClientTransport{
		Endpoint:   "http://" + srv.Addr + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport(agent)},
		MaxRetries: -1,
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "approvals", Version: "1"}, nil).Connect(t.Context(), transport, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card", Arguments: map[string]any{
		"customer": "cus_1", "amount": 50000, "currency": "eur", "idempotency_key": "mcp-big-1"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	text := res.Content[0].(*mcp.TextContent).Text
	require.Contains(t, text, `"state":"awaiting_approval"`)
	require.Contains(t, text, "waiting for a person to approve; do not retry under another key")
	tools, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		require.NotContains(t, tool.Name, "approve")
		require.NotContains(t, tool.Name, "deny")
		schema, err := json.Marshal(tool.InputSchema)
		require.NoError(t, err)
		require.NotContains(t, string(schema), "args_sha256", "no tool takes an approval: %s", tool.Name)
	}

	// The operator: another action's hash is refused and releases nothing.
	other := outbox.ArgsSHA256(json.RawMessage(`{"amount": 25}`))
	status, body = call(operator, "POST", "/v1/intents/big-1/approve", "", `{"args_sha256": "`+other+`"}`)
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, `"code":"approval_mismatch"`)
	status, body = call(operator, "GET", "/v1/intents/big-1", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, outbox.StateAwaitingApproval, intentOf(body).State)

	status, body = call(operator, "POST", "/v1/intents/big-1/approve", "", `{"args_sha256": "`+big.ArgsSHA256+`", "note": "checked with the customer"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NotNil(t, intentOf(body).ApprovedBy)
	status, body = call(agent, "GET", "/v1/intents/big-1?wait=30s", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, outbox.StateSucceeded, intentOf(body).State, body)

	// The command line, as an operator.
	cliEnv := with(env, "OUTBOX_NAMESPACE", "team-a")
	status, body = call(agent, "POST", "/v1/intents", "big-2", `{"effect": "noop", "args": {"amount": 99999}}`)
	require.Equal(t, http.StatusCreated, status, body)
	big2 := intentOf(body)
	out := runEnv(t, cliEnv, nil, "intents", "approve", "big-2", "--args-sha256", other)
	require.Equal(t, 3, out.code, out.stderr)
	require.Contains(t, out.stderr, "approval_mismatch")
	out = runEnv(t, cliEnv, nil, "intents", "deny", "big-2", "--args-sha256", big2.ArgsSHA256, "--note", "too large")
	require.Equal(t, 0, out.code, out.stderr)
	denied := intentOf(out.stdout)
	require.Equal(t, outbox.StateCancelled, denied.State)
	require.Equal(t, "approval_denied", denied.Error.Code)
	require.True(t, strings.HasPrefix(*denied.DeniedBy, "cli"), *denied.DeniedBy)
	out = runEnv(t, cliEnv, nil, "intents", "approve", "big-2", "--args-sha256", big2.ArgsSHA256)
	require.Equal(t, 3, out.code)
	require.Contains(t, out.stderr, "not_awaiting_approval")
	out = runEnv(t, cliEnv, nil, "intents", "approve", "big-2")
	require.Equal(t, 2, out.code, "--args-sha256 is required")
	out = runEnv(t, cliEnv, nil, "enqueue", "--key", "cli-1", "--effect", "noop", "--args", "{}", "--require-approval")
	require.Equal(t, 0, out.code, out.stderr)
	require.Contains(t, out.stdout, `"state": "awaiting_approval"`)
	out = runEnv(t, cliEnv, nil, "intents", "list", "--state", "awaiting_approval", "--json")
	require.Equal(t, 0, out.code, out.stderr)
	require.Contains(t, out.stdout, `"key": "cli-1"`)
	require.NotContains(t, out.stdout, `"key": "big-2"`)

	status, body = httpGet(t, "http://"+srv.Addr+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `outbox_approvals_total{decision="approved"} 1`+"\n", "approvals recorded by this server")
	require.Contains(t, body, `outbox_approvals_total{decision="expired"} 0`)
	require.Contains(t, body, `outbox_intents{state="awaiting_approval"}`)

	require.Equal(t, 0, srv.Stop())
	require.Contains(t, srv.Logs(), `"msg":"approval rules in force","rules":"noop:amount>=10000,charge:amount>=10000"`)
	require.Contains(t, srv.Logs(), `"msg":"intent approved"`)
	require.NotContains(t, srv.Logs(), operator)
}

func TestServeRefusesABadApprovalRule(t *testing.T) {
	t.Parallel()
	bundle := setup(t)
	res := runEnv(t, with(bundle.env, "OUTBOX_APPROVAL", "charge:amount>=10000,charge:currency>eur"), nil, "serve")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `OUTBOX_APPROVAL: approval rule "charge:currency>eur"`)
	res = runEnv(t, with(bundle.env, "OUTBOX_APPROVAL_WEBHOOK", "nowhere", "OUTBOX_SANDBOX", "false",
		"OUTBOX_WEBHOOKS", "hooks=http://127.0.0.1:9/x", "OUTBOX_WEBHOOK_SECRET", "whsec_c2FuZGJveA=="), nil, "serve")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `OUTBOX_APPROVAL_WEBHOOK: expected the name of an endpoint of OUTBOX_WEBHOOKS, got "nowhere"`)
}

package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/outbox"
)

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// connectMCP connects the SDK's client to /mcp with token, speaking
// protocolVersion (empty: the SDK's latest).
func (b *testBundle) connectMCP(t *testing.T, token, protocolVersion string) (*mcp.ClientSession, error) {
	t.Helper()
	transport := &mcp.StreamableClientTransport{
		Endpoint:   b.url + "/mcp",
		HTTPClient: &http.Client{Transport: &bearer{token: token, next: http.DefaultTransport}},
		MaxRetries: -1,
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(t.Context(), transport, &mcp.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

type mcpAnswer struct {
	outbox.Intent
	Duplicate bool `json:"duplicate"`
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, []byte) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	if res.IsError {
		// An error's JSON is its last text block: it has no
		// structuredContent.
		return res, []byte(res.Content[len(res.Content)-1].(*mcp.TextContent).Text)
	}
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	return res, b
}

func TestMCP(t *testing.T) {
	t.Parallel()

	for name, version := range map[string]string{
		"Latest":   "",           // the SDK's newest protocol, without sessions
		"Sessions": "2025-06-18", // an older client's protocol, with initialize
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, nil)
			cs, err := bundle.connectMCP(t, tokenAlpha, version)
			require.NoError(t, err)

			tools, err := cs.ListTools(t.Context(), nil)
			require.NoError(t, err)
			var names []string
			for _, tool := range tools.Tools {
				names = append(names, tool.Name)
				switch tool.Name {
				case "get_intent", "list_intents":
					require.True(t, tool.Annotations.ReadOnlyHint, tool.Name)
				default:
					require.True(t, *tool.Annotations.DestructiveHint, tool.Name)
					require.True(t, tool.Annotations.IdempotentHint, tool.Name)
				}
			}
			require.ElementsMatch(t, []string{"charge_card", "send_email", "create_ticket", "call_webhook", "get_intent", "list_intents"}, names)
			requirePlainObjectSchemas(t, tools.Tools)

			charge := map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur", "idempotency_key": "order-9"}
			res, body := callTool(t, cs, "charge_card", charge)
			require.False(t, res.IsError, "%s", body)
			first := decode[mcpAnswer](t, &response{body: body})
			require.False(t, first.Duplicate)
			require.Equal(t, "alpha", first.Namespace)
			res, body = callTool(t, cs, "charge_card", charge)
			require.False(t, res.IsError)
			second := decode[mcpAnswer](t, &response{body: body})
			require.True(t, second.Duplicate)
			require.Equal(t, first.ID, second.ID)

			delete(charge, "idempotency_key")
			_, body = callTool(t, cs, "charge_card", charge)
			auto1 := decode[mcpAnswer](t, &response{body: body})
			_, body = callTool(t, cs, "charge_card", charge)
			auto2 := decode[mcpAnswer](t, &response{body: body})
			require.Equal(t, outbox.KeySourceAuto, auto1.KeySource)
			require.False(t, auto1.Duplicate)
			require.True(t, auto2.Duplicate)
			require.Equal(t, auto1.ID, auto2.ID)

			charge["idempotency_key"] = "order-9"
			charge["amount"] = 5
			res, body = callTool(t, cs, "charge_card", charge)
			require.True(t, res.IsError)
			require.Contains(t, string(body), `"code":"idempotency_key_reused"`)
			require.Equal(t, 2, bundle.countIntents(t))

			// The same intent over the REST API: one store, one namespace.
			resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/order-9", token: tokenAlpha})
			require.Equal(t, first.ID, decode[outbox.Intent](t, resp).ID)

			bundle.startDispatcher(t)
			start := time.Now()
			res, body = callTool(t, cs, "get_intent", map[string]any{"key": "order-9", "wait_seconds": 30})
			require.False(t, res.IsError, "%s", body)
			require.Equal(t, outbox.StateSucceeded, decode[outbox.Intent](t, &response{body: body}).State)
			require.Less(t, time.Since(start), 25*time.Second)

			res, body = callTool(t, cs, "list_intents", map[string]any{"limit": 1})
			require.False(t, res.IsError)
			require.Contains(t, string(body), `"next_cursor":"`)
		})
	}
}

func TestMCPNamespaces(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	alpha, err := bundle.connectMCP(t, tokenAlpha, "")
	require.NoError(t, err)
	beta, err := bundle.connectMCP(t, tokenBeta, "")
	require.NoError(t, err)

	args := map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur", "idempotency_key": "only-alpha"}
	res, body := callTool(t, alpha, "charge_card", args)
	require.False(t, res.IsError, "%s", body)

	res, body = callTool(t, beta, "get_intent", map[string]any{"key": "only-alpha"})
	require.True(t, res.IsError)
	require.Contains(t, string(body), `"code":"not_found"`)
	_, body = callTool(t, beta, "list_intents", nil)
	require.JSONEq(t, `{"intents": [], "next_cursor": null}`, string(body))

	// The same key in beta is beta's own intent.
	res, body = callTool(t, beta, "charge_card", args)
	require.False(t, res.IsError)
	require.False(t, decode[mcpAnswer](t, &response{body: body}).Duplicate)
	require.Equal(t, "beta", decode[mcpAnswer](t, &response{body: body}).Namespace)
}

func TestMCPAuth(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	for _, token := range []string{"", "tok-wrong"} {
		_, err := bundle.connectMCP(t, token, "")
		require.Error(t, err, "token %q", token)
	}
	for _, token := range []string{"", "tok-wrong"} {
		_, err := bundle.connectMCP(t, token, "2025-06-18")
		require.Error(t, err, "token %q", token)
	}

	// Without tokens, on loopback, /mcp acts for namespace default.
	open := setup(t, &apiConfig{})
	cs, err := open.connectMCP(t, "", "")
	require.NoError(t, err)
	res, body := callTool(t, cs, "charge_card", map[string]any{"customer": "cus_1", "amount": 1, "currency": "eur"})
	require.False(t, res.IsError, "%s", body)
	require.Equal(t, outbox.NamespaceDefault, decode[mcpAnswer](t, &response{body: body}).Namespace)
}

// The model-key guard over /mcp, and over the REST API for callers that say
// their key is a model's (Idempotency-Key-Source: model); without that
// header the REST API takes keys as given.
func TestModelKeyGuardOverHTTP(t *testing.T) {
	t.Parallel()
	body := `{"effect": "charge", "args": {"customer": "cus_1", "amount": 1999, "currency": "eur"}}`
	model := func(key string) map[string]string {
		return map[string]string{"Idempotency-Key": key, "Idempotency-Key-Source": "model", "Content-Type": "application/json"}
	}

	t.Run("MCP", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		cs, err := bundle.connectMCP(t, tokenAlpha, "")
		require.NoError(t, err)
		charge := map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur", "idempotency_key": "model-1"}
		res, out := callTool(t, cs, "charge_card", charge)
		require.False(t, res.IsError, "%s", out)
		charge["idempotency_key"] = "model-2"
		res, out = callTool(t, cs, "charge_card", charge)
		require.True(t, res.IsError)
		require.Contains(t, string(out), `"code":"possible_duplicate"`)
		require.Contains(t, string(out), `"key":"model-1"`)
		require.Equal(t, 1, bundle.countIntents(t))
	})

	t.Run("HeaderOptsIn", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		post := func(header map[string]string, body string) *response {
			return bundle.do(t, request{method: http.MethodPost, path: "/v1/intents", token: tokenAlpha, header: header, body: body})
		}
		require.Equal(t, http.StatusCreated, post(model("m-1"), body).status)
		refused := post(model("m-2"), body)
		require.Equal(t, http.StatusConflict, refused.status, "%s", refused.body)
		require.Contains(t, string(refused.body), `"code":"possible_duplicate"`)
		require.Contains(t, string(refused.body), `m-1`)
		require.Equal(t, 1, bundle.countIntents(t))

		confirmed := post(model("m-2"), `{"effect": "charge", "new_action": true, "args": {"customer": "cus_1", "amount": 1999, "currency": "eur"}}`)
		require.Equal(t, http.StatusCreated, confirmed.status, "%s", confirmed.body)
		require.Equal(t, outbox.KeySourceModelConfirmed, decode[enqueued](t, confirmed).KeySource)

		// Without the header, the orchestrator's key is taken as given.
		plain := post(map[string]string{"Idempotency-Key": "o-3", "Content-Type": "application/json"}, body)
		require.Equal(t, http.StatusCreated, plain.status, "%s", plain.body)
		require.Equal(t, 3, bundle.countIntents(t))

		bad := post(map[string]string{"Idempotency-Key": "o-4", "Idempotency-Key-Source": "llm", "Content-Type": "application/json"}, body)
		require.Equal(t, http.StatusBadRequest, bad.status)
		require.Contains(t, string(bad.body), `"field":"Idempotency-Key-Source"`)
	})
}

// requirePlainObjectSchemas requires every tool's input schema to be a plain
// "type": "object": Anthropic's API refuses a tool whose input schema has
// oneOf, anyOf or allOf at the top level, and then every request listing
// the server's tools fails, so Claude-based hosts lose all of them.
func requirePlainObjectSchemas(t *testing.T, tools []*mcp.Tool) {
	t.Helper()
	for _, tool := range tools {
		b, err := json.Marshal(tool.InputSchema)
		require.NoError(t, err)
		var schema map[string]any
		require.NoError(t, json.Unmarshal(b, &schema))
		require.Equal(t, "object", schema["type"], tool.Name)
		for _, combinator := range []string{"oneOf", "anyOf", "allOf", "not", "if", "then", "else"} {
			require.NotContains(t, schema, combinator, "%s: %s at the top level", tool.Name, combinator)
		}
		require.NotNil(t, tool.OutputSchema, "%s: no output schema", tool.Name)
	}
}

// The role a token has is checked by /mcp's mutating tools as by the API
// (package access), and an intent records who enqueued it from the token,
// beside the client's own label in requested_by.
func TestMCPRoleAndEnqueuedBy(t *testing.T) {
	t.Parallel()

	const tokenReader = "tok-reader-0123456789"
	agentToken := access.NewToken(tokenAlpha, "alpha", access.RoleAgent)
	bundle := setup(t, &apiConfig{Tokens: []access.Token{agentToken, access.NewToken(tokenReader, "alpha", access.RoleReader)}})
	args := map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur", "idempotency_key": "who-1"}

	reader, err := bundle.connectMCP(t, tokenReader, "")
	require.NoError(t, err)
	res, body := callTool(t, reader, "charge_card", args)
	require.True(t, res.IsError)
	require.Contains(t, string(body), `"code":"forbidden"`)
	require.Contains(t, string(body), "requires the role agent or above; the token's role is reader")

	agent, err := bundle.connectMCP(t, tokenAlpha, "")
	require.NoError(t, err)
	res, body = callTool(t, agent, "charge_card", args)
	require.False(t, res.IsError, "%s", body)
	answer := decode[mcpAnswer](t, &response{body: body})
	require.NotNil(t, answer.EnqueuedBy, "%s", body)
	require.Equal(t, agentToken.Actor(), *answer.EnqueuedBy)
	require.Equal(t, "mcp:test", *answer.RequestedBy)

	// Without tokens, the local principal.
	open := setup(t, &apiConfig{})
	cs, err := open.connectMCP(t, "", "")
	require.NoError(t, err)
	res, body = callTool(t, cs, "charge_card", args)
	require.False(t, res.IsError, "%s", body)
	require.Equal(t, "api:local", *decode[mcpAnswer](t, &response{body: body}).EnqueuedBy)
}

package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testrun"
)

func TestServeAPI(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	srv := testrun.Serve(t, with(bundle.env, "OUTBOX_API_TOKENS", "s3cret-token-0123456:team-a"))

	status, body := httpGet(t, "http://"+srv.Addr+"/readyz")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"status": "ready"}`, body)

	status, body = httpGet(t, "http://"+srv.Addr+"/v1/intents")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, body, `"code":"unauthorized"`)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+srv.Addr+"/v1/intents",
		strings.NewReader(`{"effect": "noop", "args": {"n": 1}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer s3cret-token-0123456")
	req.Header.Set("Idempotency-Key", "api-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// The command line of namespace team-a sees it, carried out by serve.
	res := runEnv(t, with(bundle.env, "OUTBOX_NAMESPACE", "team-a"), nil, "intents", "show", "api-1", "--wait", "20s")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"state": "succeeded"`)

	require.Equal(t, 0, srv.Stop())
	require.NotContains(t, srv.Logs(), "s3cret-token", "tokens never reach the logs")
}

func TestServeRefusesOpenAPI(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080"} {
		res := runEnv(t, with(bundle.env, "OUTBOX_HTTP_ADDR", addr), nil, "serve")
		require.Equal(t, 1, res.code, addr)
		line := lastLine(res.stderr)
		require.True(t, strings.HasPrefix(line, "outboxd: OUTBOX_HTTP_ADDR: "), line)
		require.Contains(t, line, "OUTBOX_API_TOKENS is empty", addr)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(res.stderr), "\n")+1, "one line: %s", res.stderr)
	}
	// With tokens (and River UI's credentials), any address will do (here,
	// one that cannot be bound, which fails later and otherwise).
	res := runEnv(t, with(bundle.env, "OUTBOX_HTTP_ADDR", "192.0.2.1:8080", "OUTBOX_API_TOKENS", "t0123456789abcdef0:ns",
		"OUTBOX_UI_USER", "operator", "OUTBOX_UI_PASSWORD", "ui-password-0123456"), nil, "serve")
	require.Equal(t, 1, res.code)
	require.Contains(t, lastLine(res.stderr), "error listening on 192.0.2.1:8080")
	require.NotContains(t, res.stderr, "t:ns")
}

// Roles on tokens: a reader reads, an agent also enqueues and cancels, only
// an operator resolves; a forbidden action is 403 forbidden naming the role
// needed, over HTTP and MCP. The operator's token comes from a file that
// holds only its hash.
func TestServeRoles(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	const reader, agent, operator = "reader-token-0123456", "agent-token-01234567", "operator-token-01234"
	sum := sha256.Sum256([]byte(operator))
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte("# rotated 2026-12-01\n\nsha256:"+hex.EncodeToString(sum[:])+":team-a:operator\n"), 0o600))
	srv := testrun.Serve(t, with(bundle.env,
		"OUTBOX_API_TOKENS", reader+":team-a:reader,"+agent+":team-a",
		"OUTBOX_API_TOKENS_FILE", file))
	call := func(token, method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+srv.Addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", "roles-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	enqueue := `{"effect": "noop", "args": {"_noop": {"fail": "ambiguous"}}}`

	status, body := call(reader, "POST", "/v1/intents", enqueue)
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, `"code":"forbidden"`)
	require.Contains(t, body, "requires the role agent")
	status, _ = call(agent, "POST", "/v1/intents", enqueue)
	require.Equal(t, http.StatusCreated, status)
	status, _ = call(reader, "GET", "/v1/intents/roles-1", "")
	require.Equal(t, http.StatusOK, status)

	// The noop at most once... here deduplicated and ambiguous: it ends
	// unknown only after its attempts; make it unknown for the resolve (an
	// UPDATE, not testfactory.Intent: the intent the API enqueued).
	_, err := bundle.pool.Exec(t.Context(), `UPDATE `+pgx.Identifier{bundle.schema, "outbox_intent"}.Sanitize()+
		` SET state = 'unknown', maybe_sent = true, completed_at = now() WHERE key = 'roles-1'`)
	require.NoError(t, err)
	resolve := `{"outcome": "failed", "note": "not in the dashboard"}`
	status, body = call(agent, "POST", "/v1/intents/roles-1/resolve", resolve)
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "requires the role operator")
	status, body = call(operator, "POST", "/v1/intents/roles-1/resolve", resolve)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"state":"failed"`)

	// MCP: a reader's token lists the tools but cannot call a mutating one.
	transport := &mcp.StreamableClientTransport{
		Endpoint:   "http://" + srv.Addr + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport(reader)},
		MaxRetries: -1,
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "roles", Version: "1"}, nil).Connect(t.Context(), transport, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get_intent", Arguments: map[string]any{"key": "roles-1"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	// The sandbox has no charge effect here; noop has no tool. Any mutating
	// tool listed must refuse the reader.
	tools, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		if tool.Name == "get_intent" || tool.Name == "list_intents" {
			continue
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool.Name, Arguments: map[string]any{}})
		require.NoError(t, err)
		require.True(t, res.IsError)
		require.Contains(t, res.Content[0].(*mcp.TextContent).Text, "forbidden: ", tool.Name)
	}

	require.Equal(t, 0, srv.Stop())
	// The resolution is logged at info, naming the token by its
	// fingerprint.
	require.Regexp(t, `"level":"INFO","msg":"intent resolved","namespace":"team-a","key":"roles-1","intent_id":\d+,"outcome":"failed","by":"api:sha256:`+hex.EncodeToString(sum[:6])+`"}`, srv.Logs())
	for _, secret := range []string{reader, agent, operator} {
		require.NotContains(t, srv.Logs(), secret, "tokens never reach the logs")
	}
}

// bearerTransport sends every request with the bearer token.
func bearerTransport(token string) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultTransport.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Without tokens serve refuses to start unless OUTBOX_ALLOW_NO_AUTH=true, and
// placeholder credentials are refused beyond loopback.
func TestServeRefusesOpenMode(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	res := runEnv(t, with(bundle.env, "OUTBOX_ALLOW_NO_AUTH", ""), nil, "serve")
	require.Equal(t, 1, res.code)
	require.Contains(t, lastLine(res.stderr), "OUTBOX_API_TOKENS: not set: serve needs API tokens")
	require.Contains(t, lastLine(res.stderr), "OUTBOX_ALLOW_NO_AUTH=true")

	res = runEnv(t, with(bundle.env, "OUTBOX_HTTP_ADDR", "0.0.0.0:0", "OUTBOX_API_TOKENS", "dev-token-0123456789:default",
		"OUTBOX_UI_USER", "operator", "OUTBOX_UI_PASSWORD", "a-real-password"), nil, "serve")
	require.Equal(t, 1, res.code)
	require.Contains(t, lastLine(res.stderr), "placeholder token")
	require.NotContains(t, res.stderr, "dev-token-0123456789")

	res = runEnv(t, with(bundle.env, "OUTBOX_HTTP_ADDR", "0.0.0.0:0", "OUTBOX_API_TOKENS", "a-real-token-0123456:default",
		"OUTBOX_UI_USER", "operator", "OUTBOX_UI_PASSWORD", "change-me"), nil, "serve")
	require.Equal(t, 1, res.code)
	require.Contains(t, lastLine(res.stderr), "OUTBOX_UI_PASSWORD: is a placeholder")
}

// Refused tokens are counted in outbox_http_auth_failures_total and logged
// at most once a second per remote address, without what was presented;
// past ten, the address is slowed.
func TestServeAuthFailures(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	srv := testrun.Serve(t, with(bundle.env, "OUTBOX_API_TOKENS", "a-real-token-0123456:default"))
	const guesses = 10
	for i := range guesses {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+srv.Addr+"/v1/intents", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", fmt.Sprintf("Bearer guess-%02d-0123456789", i))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
	}
	// The eleventh guess from the address is slowed: 429 with
	// Retry-After, the token not even checked.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+srv.Addr+"/v1/intents", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer a-real-token-0123456")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.NoError(t, resp.Body.Close())
	status, body := httpGet(t, "http://"+srv.Addr+"/metrics")
	require.Equal(t, http.StatusOK, status, "a request without credentials is never slowed")
	require.Contains(t, body, fmt.Sprintf("\noutbox_http_auth_failures_total %d\n", guesses))

	require.Equal(t, 0, srv.Stop())
	logged := strings.Count(srv.Logs(), `"msg":"API authentication failed","remote_addr":"127.0.0.1"`)
	// Ten refusals within moments: one line, or a few on a machine that
	// stalled for seconds between them, never one each.
	require.GreaterOrEqual(t, logged, 1)
	require.Less(t, logged, guesses/2)
	require.NotContains(t, srv.Logs(), "guess-0")
}

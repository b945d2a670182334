package cli_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestServeAPI(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	addr, logs, stop := serve(t, with(bundle.env, "OUTBOX_API_TOKENS", "s3cret-token:team-a"))

	status, body := httpGet(t, "http://"+addr+"/readyz")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"status": "ready"}`, body)

	status, body = httpGet(t, "http://"+addr+"/v1/intents")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, body, `"code":"unauthorized"`)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/intents",
		strings.NewReader(`{"effect": "noop", "args": {"n": 1}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer s3cret-token")
	req.Header.Set("Idempotency-Key", "api-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// The command line of namespace team-a sees it, carried out by serve.
	res := runEnv(t, with(bundle.env, "OUTBOX_NAMESPACE", "team-a"), nil, "intents", "show", "api-1", "--wait", "20s")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"state": "succeeded"`)

	require.Equal(t, 0, stop())
	require.NotContains(t, logs.String(), "s3cret-token", "tokens never reach the logs")
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
	res := runEnv(t, with(bundle.env, "OUTBOX_HTTP_ADDR", "192.0.2.1:8080", "OUTBOX_API_TOKENS", "t:ns",
		"OUTBOX_UI_USER", "operator", "OUTBOX_UI_PASSWORD", "ui-password"), nil, "serve")
	require.Equal(t, 1, res.code)
	require.Contains(t, lastLine(res.stderr), "error listening on 192.0.2.1:8080")
	require.NotContains(t, res.stderr, "t:ns")
}

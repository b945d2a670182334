package cli_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestServe(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	srv := testrun.Serve(t, bundle.env)

	status, body := httpGet(t, "http://"+srv.Addr+"/healthz")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"status":"ok"}`, body)

	res := bundle.run(t, "enqueue", "--key", "serve-1", "--effect", "noop", "--args", `{"hello": "world"}`)
	require.Equal(t, 0, res.code, res.stderr)
	res = bundle.run(t, "intents", "show", "serve-1", "--wait", "20s")
	require.Equal(t, 0, res.code, res.stderr)
	intent := decode[outbox.Intent](t, res.stdout)
	require.Equal(t, outbox.StateSucceeded, intent.State)
	require.Equal(t, 1, intent.Attempts)

	// An at-most-once effect whose outcome is lost ends unknown, for an
	// operator to resolve.
	res = bundle.run(t, "enqueue", "--key", "serve-2", "--effect", "noop_at_most_once", "--args", `{"_noop": {"fail": "ambiguous"}}`)
	require.Equal(t, 0, res.code, res.stderr)
	res = bundle.run(t, "intents", "show", "serve-2", "--wait", "20s")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, outbox.StateUnknown, decode[outbox.Intent](t, res.stdout).State)
	res = bundle.run(t, "intents", "resolve", "serve-2", "--outcome", "succeeded", "--note", "checked by hand")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, outbox.StateSucceeded, decode[outbox.Intent](t, res.stdout).State)

	status, body = httpGet(t, "http://"+srv.Addr+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `outbox_effect_attempts_total{effect="noop",outcome="succeeded"} 1`)
	require.Contains(t, body, "go_goroutines")
	require.Contains(t, body, "process_start_time_seconds")

	status, _ = httpGet(t, "http://"+srv.Addr+"/nothing")
	require.Equal(t, http.StatusNotFound, status)

	require.Equal(t, 0, srv.Stop())
	out := srv.Logs()
	for _, effect := range []string{"noop", "noop_reconcilable", "noop_at_most_once"} {
		require.Contains(t, out, `"msg":"effect enabled","effect":"`+effect+`"`)
	}
	require.Contains(t, out, `"msg":"outboxd stopped"`)
	// The one error is serve-2's outcome, lost on purpose.
	require.Equal(t, 1, strings.Count(out, `"level":"ERROR"`), out)
	require.Contains(t, out, `"level":"ERROR","msg":"intent outcome unknown: an operator must resolve it"`)
}

func TestServeAutoMigrate(t *testing.T) {
	t.Parallel()

	env := map[string]string{
		"DATABASE_URL":        testdb.URL(t),
		"OUTBOX_AUTO_MIGRATE": "true",
		"OUTBOX_SANDBOX":      "true",
		"OUTBOX_SCHEMA":       testdb.Schema(t),
	}
	srv := testrun.Serve(t, env)
	require.Equal(t, 0, srv.Stop())
	require.Contains(t, srv.Logs(), `"msg":"applied migration","component":"outbox","version":1,"name":"intents"`)

	res := runEnv(t, env, nil, "migrate", "status")
	require.Contains(t, res.stdout, "\nup to date\n")
}

func TestServeRefuses(t *testing.T) {
	t.Parallel()

	t.Run("Unmigrated", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{"DATABASE_URL": testdb.URL(t), "OUTBOX_SANDBOX": "true", "OUTBOX_SCHEMA": testdb.Schema(t), "OUTBOX_ALLOW_NO_AUTH": "true"}
		res := runEnv(t, env, nil, "serve")
		require.Equal(t, 1, res.code)
		line := lastLine(res.stderr)
		require.Contains(t, line, "outboxd: schema t_")
		require.Contains(t, line, "has pending migrations")
		require.Contains(t, line, "OUTBOX_AUTO_MIGRATE=true")
	})

	// A newer release migrated the schema, during a rolling upgrade or
	// before a rollback: refused, saying so.
	t.Run("NewerSchema", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		_, err := bundle.pool.Exec(context.Background(), `INSERT INTO `+pgx.Identifier{bundle.schema, "outbox_migration"}.Sanitize()+` (version, name) VALUES (999, 'from_the_future')`)
		require.NoError(t, err)
		res := runEnv(t, bundle.env, nil, "serve")
		require.Equal(t, 1, res.code)
		require.Contains(t, lastLine(res.stderr), "is newer than this release")
		require.Contains(t, lastLine(res.stderr), "outbox 999")
	})

	t.Run("NoEffect", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		res := runEnv(t, with(bundle.env, "OUTBOX_SANDBOX", "false"), nil, "serve")
		require.Equal(t, 1, res.code)
		require.Equal(t, "outboxd: no effect is enabled: configure a provider or set OUTBOX_SANDBOX=true", lastLine(res.stderr))
	})

	t.Run("AddressInUse", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		srv := testrun.Serve(t, bundle.env)
		res := runEnv(t, with(bundle.env, "OUTBOX_HTTP_ADDR", srv.Addr), nil, "serve")
		require.Equal(t, 1, res.code)
		require.Contains(t, lastLine(res.stderr), "outboxd: error listening on "+srv.Addr)
	})
}

// lastLine is the last line of s, the error after the logs.
func lastLine(s string) string {
	var last string
	for sc := bufio.NewScanner(strings.NewReader(s)); sc.Scan(); {
		last = sc.Text()
	}
	return last
}

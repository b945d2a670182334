package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/cli"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// logWriter collects a serve's JSON logs and reports the address of its
// "outboxd serving" line on serving.
type logWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial []byte
	serving chan string
	// adminAddr is the serving line's admin_addr, if any.
	adminAddr string
}

func newLogWriter() *logWriter { return &logWriter{serving: make(chan string, 1)} }

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		var line struct {
			Msg       string `json:"msg"`
			Addr      string `json:"addr"`
			AdminAddr string `json:"admin_addr"`
		}
		if json.Unmarshal(w.partial[:i], &line) == nil && line.Msg == "outboxd serving" {
			w.adminAddr = line.AdminAddr
			w.serving <- line.Addr
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

// AdminAddr is the admin listener's address, once serving.
func (w *logWriter) AdminAddr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.adminAddr
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// serve runs outboxd serve with env until the returned stop is called, which
// returns serve's exit code, and returns the HTTP server's address.
func serve(t *testing.T, env map[string]string) (addr string, logs *logWriter, stop func() int) {
	t.Helper()
	env = with(env, "OUTBOX_HTTP_ADDR", "127.0.0.1:0", "OUTBOX_LOG_FORMAT", "json", "OUTBOX_EFFECT_TIMEOUT", "5s")
	if _, set := env["OUTBOX_ALLOW_NO_AUTH"]; !set && env["OUTBOX_API_TOKENS"] == "" {
		// On loopback, without tokens: the tests are this machine's.
		env = with(env, "OUTBOX_ALLOW_NO_AUTH", "true")
	}
	logs = newLogWriter()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve"}, &cli.RunOpts{
			Lookuper: envconfig.MapLookuper(maps.Clone(env)),
			Stderr:   logs,
			Stdout:   io.Discard,
		})
	}()
	stopped := false
	stop = func() int {
		cancel()
		select {
		case code := <-done:
			stopped = true
			return code
		case <-time.After(30 * time.Second):
			t.Fatalf("serve did not stop; logs:\n%s", logs)
			return -1
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	select {
	case addr = <-logs.serving:
	case code := <-done:
		stopped = true
		t.Fatalf("serve exited with %d; logs:\n%s", code, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start; logs:\n%s", logs)
	}
	return addr, logs, stop
}

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
	addr, logs, stop := serve(t, bundle.env)

	status, body := httpGet(t, "http://"+addr+"/healthz")
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

	status, body = httpGet(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `outbox_effect_attempts_total{effect="noop",outcome="succeeded"} 1`)
	require.Contains(t, body, "go_goroutines")
	require.Contains(t, body, "process_start_time_seconds")

	status, _ = httpGet(t, "http://"+addr+"/nothing")
	require.Equal(t, http.StatusNotFound, status)

	require.Equal(t, 0, stop())
	out := logs.String()
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
	_, logs, stop := serve(t, env)
	require.Equal(t, 0, stop())
	require.Contains(t, logs.String(), `"msg":"applied migration","component":"outbox","version":1,"name":"intents"`)

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
		addr, _, _ := serve(t, bundle.env)
		res := runEnv(t, with(bundle.env, "OUTBOX_HTTP_ADDR", addr), nil, "serve")
		require.Equal(t, 1, res.code)
		require.Contains(t, lastLine(res.stderr), "outboxd: error listening on "+addr)
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

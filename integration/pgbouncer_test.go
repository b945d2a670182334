package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// Debian's PgBouncer (1.18: no prepared statements in transaction mode) in
// transaction mode in front of the test database, as most busy PostgreSQL
// servers are run. serve runs through it (OUTBOX_POLL_ONLY, its session
// needs on PgBouncer's session-mode database), while Go, Python and
// TypeScript callers enqueue through it in their own transactions, on
// connections that share PgBouncer's few server connections. Every
// acknowledged intent ends with its effect made once; the latency to a
// terminal state is measured against serve and the same Go caller on
// direct connections, in the same run.
func TestPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	bouncer := startPgBouncer(t, e.pool)
	requireClientTools(t)

	sb, err := sandbox.Start(&sandbox.Config{})
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	e.vars = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + testdb.URL(t),
		"OUTBOX_SCHEMA=" + e.schema,
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_ALLOW_NO_AUTH=true",
		"OUTBOX_EFFECT_TIMEOUT=2s",
		"OUTBOX_WORKERS=10",
		// The default poll interval: through PgBouncer serve only polls,
		// and the latency measured includes it.
		measuredPollInterval,
		// Every delivery performed, none deduplicated: an effect made
		// twice shows as two deliveries of one key.
		"OUTBOX_WEBHOOKS=hook=" + sb.Webhooks.EndpointURL("hook", false),
		"OUTBOX_WEBHOOK_SECRET=" + sb.Webhooks.Secret(),
	}
	args := func(key string) map[string]any {
		return map[string]any{"endpoint": "hook", "payload": map[string]any{"key": key}}
	}
	const perCaller = 60

	// Go callers on a pool and a serve, direct: the reference.
	direct := e.serve()
	goCallers(t, e.client, e.pool, "direct", perCaller, args)
	waitAllTerminal(t, e, "direct", perCaller)
	stopGracefully(t, direct)

	// What cannot keep outbox's guarantees behind a transaction pooler is
	// refused at start, in one line, before anything is done.
	refused := func(want string, extra ...string) {
		t.Helper()
		refusedCmd(t, e, []string{"serve"}, want, extra...)
	}
	refused("DATABASE_URL: its connections are not sessions", "DATABASE_URL="+bouncer.url("outbox_tx"))
	refused("OUTBOX_SESSION_DATABASE_URL: not set", "DATABASE_URL="+bouncer.url("outbox_tx"), "OUTBOX_POLL_ONLY=true")
	refused("OUTBOX_SESSION_DATABASE_URL: its connections are not sessions", "DATABASE_URL="+bouncer.url("outbox_tx"),
		"OUTBOX_POLL_ONLY=true", "OUTBOX_SESSION_DATABASE_URL="+bouncer.url("outbox_tx"))
	// migrate's lock is a session's too; on the session database it runs.
	refusedCmd(t, e, []string{"migrate", "status"}, "DATABASE_URL: its connections are not sessions", "DATABASE_URL="+bouncer.url("outbox_tx"))
	out, stderr, code := e.runWith([]string{"DATABASE_URL=" + bouncer.url("outbox_tx"), "OUTBOX_POLL_ONLY=true",
		"OUTBOX_SESSION_DATABASE_URL=" + bouncer.url("outbox_session")}, "migrate", "up")
	require.Zero(t, code, "migrate up through PgBouncer: %s%s", out, stderr)

	// The same through PgBouncer, with the client packages beside them.
	pooled := e.serve(
		"DATABASE_URL="+bouncer.url("outbox_tx"),
		"OUTBOX_POLL_ONLY=true",
		"OUTBOX_SESSION_DATABASE_URL="+bouncer.url("outbox_session"),
	)
	// pgx's cached statements are named: a pool behind a transaction
	// pooler sends unnamed ones (docs/operations.md, "Behind PgBouncer").
	goPool, err := pgxpool.New(ctx, bouncer.url("outbox_tx")+"&default_query_exec_mode=exec")
	require.NoError(t, err)
	t.Cleanup(goPool.Close)
	goClient, err := outbox.NewClient(goPool, &outbox.Config{PollOnly: true, Schema: e.schema})
	require.NoError(t, err)

	acked := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	run := func(namespace string, cmd *exec.Cmd) {
		defer wg.Done()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		mu.Lock()
		defer mu.Unlock()
		acked[namespace] = len(strings.Fields(string(out)))
		if err != nil {
			t.Errorf("the %s caller failed after %d enqueues: %v\n%s", namespace, acked[namespace], err, stderr.String())
		}
	}
	wg.Add(3)
	python := exec.Command(psycopgPython(), "testdata/pgbouncer/enqueue.py",
		bouncer.url("outbox_tx"), e.schema, "python", strconv.Itoa(perCaller))
	python.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("..", "clients", "python", "src"))
	go run("python", python)
	go run("typescript", exec.Command("node", "testdata/pgbouncer/enqueue.mjs",
		clientPackageDir(t), bouncer.url("outbox_tx"), e.schema, "typescript", strconv.Itoa(perCaller)))
	go func() {
		defer wg.Done()
		goCallers(t, goClient, goPool, "go", perCaller, args)
		mu.Lock()
		acked["go"] = perCaller
		mu.Unlock()
	}()
	wg.Wait()
	require.False(t, t.Failed(), "a caller failed through PgBouncer")
	for _, ns := range []string{"go", "python", "typescript"} {
		require.Equal(t, perCaller, acked[ns], "%s enqueues acknowledged", ns)
		waitAllTerminal(t, e, ns, perCaller)
	}
	// A wait through PgBouncer (the waits' LISTEN is on the session
	// database): the HTTP API answers with the terminal intent.
	res, err := goClient.EnqueueTx(ctx, goPool, &outbox.EnqueueParams{Namespace: "go", Key: "go-wait", Effect: "webhook", Args: args("go-wait")})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	intent, err := goClient.Wait(wctx, "go", "go-wait")
	cancel()
	require.NoError(t, err)
	require.Equal(t, outbox.StateSucceeded, intent.State, "%+v", res.Intent)
	// And an agent's wait over HTTP: serve's waits listen on the session
	// database, so the answer comes with the outcome, not at the end of
	// the wait.
	httpClient := &http.Client{Timeout: 30 * time.Second}
	require.Equal(t, http.StatusCreated, agentEnqueue(ctx, httpClient, pooled.addr, "http-wait", "webhook", args("http-wait")).Status)
	waitStart := time.Now()
	ans := agentGet(ctx, httpClient, pooled.addr, "http-wait", 20*time.Second)
	require.NoError(t, ans.Err)
	require.NotNil(t, ans.Intent, "%+v", ans)
	require.Equal(t, outbox.StateSucceeded, ans.Intent.State)
	require.Less(t, time.Since(waitStart), 10*time.Second, "the wait was not woken")
	require.NotContains(t, pooled.output(), "level=ERROR")

	// Counts: every acknowledged key recorded and succeeded, one delivery
	// each.
	var intents, succeeded, lost int
	require.NoError(t, e.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM %s`, e.table("outbox_intent"))).Scan(&intents, &succeeded))
	for ns, n := range acked {
		var found int
		require.NoError(t, e.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE namespace = $1 AND key NOT IN ('go-wait', 'http-wait')`, e.table("outbox_intent")), ns).Scan(&found))
		lost += n - found
	}
	perKey := map[string]int{}
	for _, d := range sb.Webhooks.Deliveries() {
		var body struct {
			Key string `json:"key"`
		}
		require.NoError(t, json.Unmarshal(d.Body, &body))
		perKey[body.Key]++
	}
	effects, duplicates := 0, 0
	for _, n := range perKey {
		effects += n
		if n > 1 {
			duplicates++
		}
	}
	directP50, directP95 := latency(t, e, []string{"direct"})
	pooledP50, pooledP95 := latency(t, e, []string{"go"})
	clientsP50, _ := latency(t, e, []string{"python", "typescript"})
	t.Logf("TestPgBouncer: PgBouncer 1.18 transaction mode, faults 0, intents %d (go %d, python %d, typescript %d through PgBouncer; %d direct), effects %d, duplicates %d, lost %d; "+
		"latency enqueue to terminal p50/p95: direct %s/%s, through PgBouncer %s/%s (python and typescript p50 %s)",
		intents, acked["go"], acked["python"], acked["typescript"], perCaller, effects, duplicates, lost,
		directP50, directP95, pooledP50, pooledP95, clientsP50)
	require.Zero(t, lost, "acknowledged intents lost")
	require.Zero(t, duplicates, "effects made twice")
	require.Equal(t, intents, succeeded, "intents not succeeded")
	require.Equal(t, intents, effects, "one effect per intent")
}

// refusedCmd runs an outboxd command that must fail at start, its last
// line containing want.
func refusedCmd(t *testing.T, e *env, args []string, want string, extra ...string) {
	t.Helper()
	cmd := exec.Command(outboxd(t), args...)
	cmd.Env = append(slices.Clone(e.vars), extra...)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "outboxd %v started with %v:\n%s", args, extra, out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Contains(t, lines[len(lines)-1], want, "%s", out)
}

// runWith runs an outboxd command with extra variables.
func (e *env) runWith(extra []string, args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	saved := e.vars
	e.vars = append(slices.Clone(e.vars), extra...)
	defer func() { e.vars = saved }()
	return e.run(args...)
}

// goCallers enqueues n webhook intents of namespace with EnqueueTx, each in
// a transaction of its own begun on pool, from two goroutines.
func goCallers(t *testing.T, client *outbox.Client, pool *pgxpool.Pool, namespace string, n int, args func(string) map[string]any) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 2 {
				key := fmt.Sprintf("%s-%04d", namespace, i)
				tx, err := pool.Begin(ctx)
				if err == nil {
					_, err = client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Namespace: namespace, Key: key, Effect: "webhook", Args: args(key)})
					if err == nil {
						err = tx.Commit(ctx)
					}
					_ = tx.Rollback(ctx)
				}
				if err != nil {
					errs[g] = fmt.Errorf("enqueue %s: %w", key, err)
					return
				}
				// A caller's pace, not a flood: the latency measured is
				// an intent's, not a queue's.
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// waitAllTerminal waits until n intents of namespace are terminal.
func waitAllTerminal(t *testing.T, e *env, namespace string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var done int
		_ = e.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s WHERE namespace = $1 AND completed_at IS NOT NULL`, e.table("outbox_intent")), namespace).Scan(&done)
		return done >= n
	}, 60*time.Second, 50*time.Millisecond, "intents of %s did not all end", namespace)
}

// latency is the median and 95th percentile of enqueue (the transaction's
// start) to terminal of the intents of namespaces.
func latency(t *testing.T, e *env, namespaces []string) (p50, p95 time.Duration) {
	t.Helper()
	var a, b float64
	require.NoError(t, e.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at)),
		percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at))
		FROM %s WHERE namespace = ANY($1) AND completed_at IS NOT NULL`, e.table("outbox_intent")), namespaces).Scan(&a, &b))
	return time.Duration(a * float64(time.Second)).Round(time.Millisecond), time.Duration(b * float64(time.Second)).Round(time.Millisecond)
}

// requireClientTools needs python3 with psycopg 3 and node with the
// TypeScript client package built (.ci/run installs both).
func requireClientTools(t *testing.T) {
	t.Helper()
	missing := func(what, hint string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing; .ci/run installs it", what)
		}
		t.Skipf("%s is missing: %s", what, hint)
	}
	if psycopgPython() == "" {
		missing("python3 with psycopg 3", "apt-get install python3-psycopg")
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node", "install Node.js")
	}
	for _, p := range []string{"node_modules/pg", "dist/index.js"} {
		if _, err := os.Stat(filepath.Join(clientPackageDir(t), p)); err != nil {
			missing("clients/typescript/"+p, "cd clients/typescript && npm ci && npm run build")
		}
	}
}

// psycopgPython is a python3 that imports psycopg 3: the one on PATH, or
// Debian's (which .ci/run installs it for) when that one has none; "" when
// neither does.
func psycopgPython() string {
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import psycopg").Run() == nil {
			return p
		}
	}
	return ""
}

// clientPackageDir is clients/typescript, absolute.
func clientPackageDir(t *testing.T) string {
	dir, err := filepath.Abs(filepath.Join("..", "clients", "typescript"))
	require.NoError(t, err)
	return dir
}

// pgBouncer is a PgBouncer the test started.
type pgBouncer struct {
	port int
	user string
}

// url is a connection string to one of its databases: outbox_tx (pool_mode
// transaction) or outbox_session (pool_mode session).
func (b *pgBouncer) url(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", b.user, b.port, database)
}

// startPgBouncer starts Debian's PgBouncer on a free loopback port in front
// of pool's database, with two databases: outbox_tx in transaction mode and
// outbox_session in session mode. Its server pools are small (five), so
// that the callers' connections share server connections as they do on a
// busy server. It runs as the postgres user when the test runs as root
// (PgBouncer refuses root), and is stopped at the end of the test. Without
// the package the test skips with one line (fails under CI).
func startPgBouncer(t *testing.T, pool *pgxpool.Pool) *pgBouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/pgbouncer"); statErr == nil {
			bin = "/usr/sbin/pgbouncer"
		} else if os.Getenv("CI") != "" {
			t.Fatal("pgbouncer is missing; .ci/run installs it")
		} else {
			t.Skip("pgbouncer is not installed (apt-get install pgbouncer)")
		}
	}
	cc := pool.Config().ConnConfig
	credential, err := pgcluster.PostgresCredential()
	require.NoError(t, err)
	// Not t.TempDir(): its parent is the test's own, which the postgres
	// user cannot enter.
	dir, err := os.MkdirTemp("", "pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// The same port can be taken between this and PgBouncer's bind: then
	// PgBouncer exits, and the test says so.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	server := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cc.Host, cc.Port, cc.Database, cc.User)
	ini := fmt.Sprintf(`[databases]
outbox_tx = %[1]s pool_mode=transaction
outbox_session = %[1]s pool_mode=session
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %[2]d
unix_socket_dir =
auth_type = trust
auth_file = %[3]s/users.txt
pool_mode = transaction
default_pool_size = 5
max_client_conn = 200
logfile = %[3]s/pgbouncer.log
`, server, port, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(strconv.Quote(cc.User)+` ""`+"\n"), 0o644))
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	if credential != nil {
		require.NoError(t, os.Chown(dir, int(credential.Uid), int(credential.Gid)))
		for _, f := range []string{"pgbouncer.ini", "users.txt"} {
			require.NoError(t, os.Chown(filepath.Join(dir, f), int(credential.Uid), int(credential.Gid)))
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: credential}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Logf("pgbouncer said:\n%s\n%s", out.String(), tail(string(log), 40))
		}
	})
	b := &pgBouncer{port: port, user: cc.User}
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgconn.Connect(ctx, b.url("outbox_tx"))
		if err != nil {
			return false
		}
		_ = conn.Close(ctx)
		return true
	}, 10*time.Second, 50*time.Millisecond, "pgbouncer did not accept connections")
	select {
	case <-exited:
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		t.Fatalf("pgbouncer exited:\n%s\n%s", out.String(), log)
	default:
	}
	return b
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

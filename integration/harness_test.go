package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

func TestMain(m *testing.M) {
	if err := setTestFlags(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := testdb.RunParallel(m, parallel)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

// outboxd builds the outboxd binary once per test run.
func outboxd(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binError = os.MkdirTemp("", "outboxd-bin-*")
		if binError != nil {
			return
		}
		binPath = filepath.Join(binDir, "outboxd")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/outboxd")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			binError = fmt.Errorf("go build: %w\n%s", err, out.String())
		}
	})
	require.NoError(t, binError)
	return binPath
}

// env is one test's environment for outboxd processes.
type env struct {
	t      testing.TB
	client *outbox.Client
	pool   *pgxpool.Pool
	schema string
	vars   []string
}

func newEnv(t testing.TB, extra ...string) *env {
	t.Helper()
	pool, schema := testdb.MigratedSchema(t)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	return &env{t: t, client: client, pool: pool, schema: schema, vars: append(baseVars(t, schema), extra...)}
}

// baseVars are the variables of an outboxd process on the test database's
// schema.
func baseVars(t testing.TB, schema string) []string {
	vars := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + testdb.URL(t),
		"OUTBOX_SCHEMA=" + schema,
		"OUTBOX_SANDBOX=true",
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		// Loopback, without tokens: the tests are this machine's.
		"OUTBOX_ALLOW_NO_AUTH=true",
		"OUTBOX_EFFECT_TIMEOUT=1s",
		"OUTBOX_WORKERS=10",
	}
	// Passed through, so that the whole suite can also run without first
	// attempts in batches (on by default, as for every test here):
	// OUTBOX_BATCH_FIRST_ATTEMPTS=false go test ./integration.
	if v, ok := os.LookupEnv("OUTBOX_BATCH_FIRST_ATTEMPTS"); ok {
		vars = append(vars, "OUTBOX_BATCH_FIRST_ATTEMPTS="+v)
	}
	return vars
}

// table is the quoted name of a table in the env's schema.
func (e *env) table(name string) string { return pgx.Identifier{e.schema, name}.Sanitize() }

// run runs an outboxd command to completion.
func (e *env) run(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	return e.runBin(outboxd(e.t), args...)
}

// runBin is run with another outboxd binary (a previous release's).
func (e *env) runBin(bin string, args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = e.vars
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code = 0
	if err != nil {
		var exitErr *exec.ExitError
		require.True(e.t, errors.As(err, &exitErr), "running outboxd %v: %v", args, err)
		code = exitErr.ExitCode()
	}
	return out.String(), errOut.String(), code
}

// process is a running `outboxd serve`.
type process struct {
	t    testing.TB
	cmd  *exec.Cmd
	done chan struct{}
	// addr is where it serves HTTP.
	addr string

	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
}

// serve starts `outboxd serve` and waits until it listens. extra variables
// are added to the env's, for this process only.
func (e *env) serve(extra ...string) *process {
	e.t.Helper()
	return e.serveBin(outboxd(e.t), extra...)
}

// testPollInterval is every serve's OUTBOX_FETCH_POLL_INTERVAL here, unless
// the test sets its own. These tests check what happens, not how soon: a job
// waits for its notification, or for a poll at most a second later. At the
// default's 100 ms, every queue of up to twelve serves alive at once polling
// ten times a second took a sixth of the package's CPU on 2 cores (50 of
// 300 CPU-seconds). The tests that measure the wait (TestRecoveryTime,
// TestPgBouncer) set measuredPollInterval.
const testPollInterval = "OUTBOX_FETCH_POLL_INTERVAL=1s"

// measuredPollInterval is serve's default poll interval, for the tests that
// measure how soon a job is taken up.
var measuredPollInterval = "OUTBOX_FETCH_POLL_INTERVAL=" + dispatcher.FetchPollIntervalDefault.String()

// serveBin is serve with another outboxd binary (a previous release's).
func (e *env) serveBin(bin string, extra ...string) *process {
	e.t.Helper()
	cmd := exec.Command(bin, "serve")
	// First, so that the env's or extra's own setting wins (exec keeps the
	// last value of a variable).
	cmd.Env = append(append([]string{testPollInterval}, e.vars...), extra...)
	stderr, err := cmd.StderrPipe()
	require.NoError(e.t, err)
	cmd.Stdout = io.Discard
	require.NoError(e.t, cmd.Start())
	p := &process{t: e.t, cmd: cmd, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.cond.Broadcast()
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	e.t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if e.t.Failed() {
			e.t.Logf("outboxd serve (pid %d) said:\n%s", cmd.Process.Pid, p.output())
		}
	})
	line := p.waitFor("outboxd serving", 30*time.Second)
	if _, after, ok := strings.Cut(line, "addr="); ok {
		p.addr, _, _ = strings.Cut(after, " ")
	}
	return p
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitFor waits until the process logged a line containing s, and returns it.
func (p *process) waitFor(s string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer timer.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := 0
	for {
		for ; seen < len(p.lines); seen++ {
			if strings.Contains(p.lines[seen], s) {
				return p.lines[seen]
			}
		}
		select {
		case <-p.done:
			p.t.Fatalf("outboxd exited before logging %q:\n%s", s, strings.Join(p.lines, "\n"))
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("outboxd did not log %q within %s:\n%s", s, timeout, strings.Join(p.lines, "\n"))
		}
		p.cond.Wait()
	}
}

func (p *process) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// kill9 kills the process the way a crash would, and waits for it to be gone.
func (p *process) kill9() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Fatal("outboxd did not die")
	}
}

// wait waits until the intent is terminal.
func (e *env) wait(key string, timeout time.Duration) *outbox.Intent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	intent, err := e.client.Wait(ctx, "", key)
	require.NoError(e.t, err, "intent %s did not become terminal (last seen %+v)", key, intent)
	return intent
}

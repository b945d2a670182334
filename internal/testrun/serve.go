package testrun

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/outbox-dev/outbox/internal/cli"
)

// startTimeout bounds how long Serve waits for serve's "outboxd serving".
const startTimeout = 30 * time.Second

// Server is an outboxd serve running in process.
type Server struct {
	// Addr is the HTTP listener's address (the API and /metrics).
	Addr string

	cancel  context.CancelFunc
	done    chan int
	logs    *logWriter
	stopMu  sync.Mutex
	stopped bool
	code    int
	tb      testing.TB
}

// Serve runs outboxd serve, the real command with its real configuration,
// with vars as its whole environment, until Stop or the test's end. Whatever
// vars say, serve listens on a free loopback port, logs JSON and gives
// attempts five seconds; without OUTBOX_ALLOW_NO_AUTH or OUTBOX_API_TOKENS
// it allows requests without a token (the tests are this machine's). The
// test fails if serve exits or does not start within 30 seconds.
func Serve(tb testing.TB, vars map[string]string) *Server {
	tb.Helper()
	env := maps.Clone(vars)
	if env == nil {
		env = map[string]string{}
	}
	env["OUTBOX_HTTP_ADDR"] = "127.0.0.1:0"
	env["OUTBOX_LOG_FORMAT"] = "json"
	env["OUTBOX_EFFECT_TIMEOUT"] = effectTimeoutDefault.String()
	if _, set := env["OUTBOX_ALLOW_NO_AUTH"]; !set && env["OUTBOX_API_TOKENS"] == "" {
		env["OUTBOX_ALLOW_NO_AUTH"] = "true"
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cancel: cancel, done: make(chan int, 1), logs: newLogWriter(), tb: tb}
	go func() {
		s.done <- cli.Run(ctx, []string{"serve"}, &cli.RunOpts{
			Lookuper: envconfig.MapLookuper(env),
			Stderr:   s.logs,
			Stdout:   io.Discard,
		})
	}()
	tb.Cleanup(func() { s.Stop() })
	select {
	case s.Addr = <-s.logs.serving:
	case code := <-s.done:
		s.stopMu.Lock()
		s.stopped, s.code = true, code
		s.stopMu.Unlock()
		tb.Fatalf("testrun: serve exited with %d; logs:\n%s", code, s.logs)
	case <-time.After(startTimeout):
		tb.Fatalf("testrun: serve did not start; logs:\n%s", s.logs)
	}
	return s
}

// AdminAddr is the admin listener's address, "" when serve has none.
func (s *Server) AdminAddr() string {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	return s.logs.adminAddr
}

// Logs returns what serve has logged so far, one JSON object a line.
func (s *Server) Logs() string { return s.logs.String() }

// Stop stops serve as a SIGTERM would (its context ends), waits for it to
// return and returns its exit code. Later calls return the same code.
func (s *Server) Stop() int {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stopped {
		return s.code
	}
	s.cancel()
	select {
	case s.code = <-s.done:
		s.stopped = true
	case <-time.After(stopTimeout):
		s.tb.Fatalf("testrun: serve did not stop; logs:\n%s", s.logs)
	}
	return s.code
}

// logWriter collects serve's JSON logs and reports the address of its
// "outboxd serving" line on serving. Its writes never block, so serve never
// waits on a test that is not reading.
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
			select {
			case w.serving <- line.Addr:
			default:
			}
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

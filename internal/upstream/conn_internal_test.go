package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
)

// A child gets only what inherit and env name: an empty inherit list, or
// one whose variables are unset, with no env, gives it an empty
// environment, never outboxd's (exec.Cmd's nil Env means the parent's).
func TestChildEnvironmentOnlyDeclared(t *testing.T) {
	t.Setenv("OUTBOX_TEST_LEAK", "outboxd's own secret")
	for name, decl := range map[string]string{
		"EmptyInherit":      "    inherit: []\n",
		"InheritUnset":      "    inherit: [OUTBOX_TEST_NOT_SET]\n",
		"InheritAndEnvUsed": "    inherit: [OUTBOX_TEST_NOT_SET]\n    env: {A: \"{env.TOKEN}\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := "upstreams:\n  up:\n    command: [sh]\n" + decl
			f, err := ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnvFunc: func(n string) (string, bool) {
				return "token-value-1234", n == "TOKEN"
			}})
			require.NoError(t, err)
			c := NewConn(f.Upstreams[0], nil)
			t.Cleanup(c.Close)
			cmd, err := c.command(c.members[0])
			require.NoError(t, err)
			require.NotNil(t, cmd.Env, "a nil Env hands the child outboxd's whole environment")
			for _, kv := range cmd.Env {
				require.Equal(t, "A=token-value-1234", kv)
			}
		})
	}
}

// A child's stderr line over 64 KB does not stop the reading of its
// stderr (a child blocked writing stderr answers no call): the line is
// logged cut, and the lines after it are read.
func TestChildStderrLongLine(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	f, err := ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    command: [sh]\n"), &declared.Config{})
	require.NoError(t, err)
	c := NewConn(f.Upstreams[0], &ConnConfig{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	r, w := io.Pipe()
	done := make(chan struct{})
	go func() {
		c.logStderr(r)
		close(done)
	}()
	written := make(chan error, 1)
	go func() {
		_, err := io.WriteString(w, strings.Repeat("x", 200<<10)+"\nafter the long line\n")
		if err == nil {
			err = w.Close()
		}
		written <- err
	}()
	select {
	case err := <-written:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		_ = r.Close()
		require.FailNow(t, "the child's stderr is no longer read: its writes block")
	}
	<-done
	require.Contains(t, buf.String(), "after the long line")
	require.Less(t, buf.Len(), 100<<10, "a long line is logged cut")
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// A stdio call refused before it was written (here, on a session already
// closed) sent nothing: not_sent, not an ambiguous lost outcome.
func TestStdioCallNotWrittenIsNotSent(t *testing.T) {
	t.Parallel()
	f, err := ParseFile("effects.yaml", []byte(childFile("    connect_timeout: 20s\n")), &declared.Config{LookupEnvFunc: func(n string) (string, bool) {
		return "1", n == "CHILD"
	}})
	require.NoError(t, err)
	c := NewConn(f.Upstreams[0], nil)
	t.Cleanup(c.Close)
	m, s, release, err := c.acquire(context.Background())
	require.NoError(t, err)
	release()
	require.NoError(t, s.Close())
	// The session's end is noticed by a goroutine; here a call takes the
	// session before it is.
	require.Eventually(t, func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.gone }, 10*time.Second, 10*time.Millisecond)
	m.mu.Lock()
	m.gone = false
	m.mu.Unlock()

	tool := &Tool{conn: c, locked: &LockedTool{Name: "write"}, name: "up_write", guarantee: effects.GuaranteeAtMostOnce}
	_, err = tool.Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{"text":"a"}`), ProviderKey: "pk"})
	class, code := effects.Classify(err)
	require.Equal(t, effects.ClassNotSent, class, err.Error())
	require.Equal(t, CodeUpstreamUnavailable, code)
}

// The HTTP probe takes the call's own answer: a later request under the
// call's context (the notification cancelling it) answered 401 says
// nothing of the call, which may have acted.
func TestHTTPProbeTakesTheCallsAnswer(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) > 1 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hs.Close)
	f, err := ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    url: \"{env.URL}\"\n"), &declared.Config{LookupEnvFunc: func(n string) (string, bool) {
		return hs.URL, n == "URL"
	}})
	require.NoError(t, err)
	rt := &upstreamRoundTripper{u: f.Upstreams[0], base: http.DefaultTransport}
	ctx, probe := withProbe(context.Background())
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
	require.Equal(t, http.StatusOK, probe.status)
	require.True(t, probe.written)
}

// A recorded tool's slot and session are reserved before the claim: a
// child slow to start is started by Reserve, and the call made under the
// reservation spends none of its time on the start.
func TestReserveStartsChildBeforeCall(t *testing.T) {
	t.Parallel()
	f, err := ParseFile("effects.yaml", []byte(childFile("    connect_timeout: 20s\n    max_in_flight: 1\n")), &declared.Config{LookupEnvFunc: func(n string) (string, bool) {
		return "1500ms", n == "CHILD"
	}})
	require.NoError(t, err)
	c := NewConn(f.Upstreams[0], nil)
	t.Cleanup(c.Close)
	tool := &Tool{conn: c, locked: &LockedTool{Name: "write"}, name: "up_write", guarantee: effects.GuaranteeAtMostOnce}

	start := time.Now()
	ctx, release := tool.Reserve(context.Background())
	require.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "the child started during Reserve")
	callCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = tool.Execute(callCtx, &effects.Request{Args: json.RawMessage(`{"text":"a"}`), ProviderKey: "pk"})
	require.NoError(t, err)
	// The lone slot is the reservation's until released.
	_, _, _, err = c.acquire(ctxWithTimeout(t, 200*time.Millisecond))
	require.Error(t, err)
	release()
	_, _, rel, err := c.acquire(ctxWithTimeout(t, 5*time.Second))
	require.NoError(t, err)
	rel()

	// A reservation that failed is carried to the call: not_sent.
	c.Close()
	ctx, release = tool.Reserve(context.Background())
	defer release()
	_, err = tool.Execute(ctx, &effects.Request{Args: json.RawMessage(`{"text":"a"}`), ProviderKey: "pk"})
	class, _ := effects.Classify(err)
	require.Equal(t, effects.ClassNotSent, class)
}

func ctxWithTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A real child that writes a stderr line over 64 KB keeps answering: its
// stderr is read whatever the lines' length.
func TestChildStderrLongLineKeepsAnswering(t *testing.T) {
	t.Parallel()
	f, err := ParseFile("effects.yaml", []byte(childFile("    timeout: 5s\n    connect_timeout: 20s\n")), &declared.Config{LookupEnvFunc: func(n string) (string, bool) {
		return "1", n == "CHILD"
	}})
	require.NoError(t, err)
	c := NewConn(f.Upstreams[0], nil)
	t.Cleanup(c.Close)
	tool := &Tool{conn: c, locked: &LockedTool{Name: "write"}, name: "up_write", guarantee: effects.GuaranteeAtMostOnce}
	for i := range 3 {
		_, err := tool.Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{"text":"a","stderr":300000}`), ProviderKey: "pk"})
		require.NoError(t, err, "call %d", i)
	}
}

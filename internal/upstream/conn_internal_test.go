package upstream

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
			f, err := ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnv: func(n string) (string, bool) {
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

package upstream_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/upstream"
)

// A stdio child's whole process group is stopped with it: the grandchild
// of a wrapper (npx, uvx, sh) does not outlive the upstream's connection.
func TestUpstreamChildProcessGroupStopped(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	require.NoError(t, err)
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	script := fmt.Sprintf("sleep 300 & echo $! > %s; exec %s", pidFile, self)
	file := fmt.Sprintf("upstreams:\n  up:\n    command: [sh, -c, %q]\n    env: {OUTBOX_UPSTREAM_TEST_CHILD: \"{env.SRV}\"}\n    connect_timeout: 10s\n", script)
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnvFunc: func(n string) (string, bool) { return "1", n == "SRV" }})
	require.NoError(t, err)
	conn := upstream.NewConn(f.Upstreams[0], nil)
	_, listed, err := conn.ListTools(context.Background())
	require.NoError(t, err)
	require.Len(t, listed, 1)
	raw, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, 0), "the grandchild runs")

	conn.Close()
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 50*time.Millisecond,
		"the grandchild was stopped with its group")
}

package integration

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
)

// The tools operators run PostgreSQL with (Patroni, etcd, pgBackRest,
// PgBouncer), started by the tests that run outbox among them.

// requireOperatorTool returns the path of a Debian package's binary, or
// skips with one line (fails under CI, whose .ci/run installs it).
func requireOperatorTool(t *testing.T, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing; .ci/run installs %s", name, pkg)
	}
	t.Skipf("%s is not installed (apt-get install %s)", name, pkg)
	return ""
}

func isExecutable(p string) bool {
	info, err := os.Stat(p)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// operatorDir is a fresh directory the postgres user owns when the test
// runs as root (the tools refuse root), removed at the end of the test.
// Not under t.TempDir(), whose parent the postgres user cannot enter.
func operatorDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	credential, err := pgcluster.PostgresCredential()
	require.NoError(t, err)
	if credential != nil {
		require.NoError(t, os.Chown(dir, int(credential.Uid), int(credential.Gid)))
	}
	return dir
}

// asPostgres makes cmd run as the postgres user when the test runs as
// root, and in dir.
func asPostgres(t *testing.T, cmd *exec.Cmd, dir string) {
	t.Helper()
	credential, err := pgcluster.PostgresCredential()
	require.NoError(t, err)
	cmd.Dir = dir
	if credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: credential}
	}
}

// writeOwned writes a file in an operatorDir, owned by the postgres user
// when the test runs as root.
func writeOwned(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), mode))
	credential, err := pgcluster.PostgresCredential()
	require.NoError(t, err)
	if credential != nil {
		require.NoError(t, os.Chown(path, int(credential.Uid), int(credential.Gid)))
	}
}

// toolProcess is a long-running tool the test started.
type toolProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

// startTool starts args[0] as the postgres user (when root) in dir, its
// output in dir/name.log, and stops it at the end of the test (SIGTERM,
// then SIGKILL after stopWait), printing its log's tail if the test failed.
func startTool(t *testing.T, dir, name string, stopWait time.Duration, args ...string) *toolProcess {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	asPostgres(t, cmd, dir)
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	d := &toolProcess{cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); _ = f.Close(); close(d.exited) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			d.stop(stopWait)
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("%s said (last lines):\n%s", name, tail(string(b), 60))
			}
		})
	})
	return d
}

// stop sends SIGTERM and waits up to wait, then kills.
func (d *toolProcess) stop(wait time.Duration) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(wait):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// fullPGBinDir is a directory with every PostgreSQL server binary
// (Patroni runs pg_controldata, pg_rewind and others besides initdb and
// pg_ctl): pgcluster's, or Debian's newest.
func fullPGBinDir(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.Reverse(dirs)
	if d, err := pgcluster.FindBinDir(); err == nil {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "pg_controldata")) && isExecutable(filepath.Join(d, "pg_basebackup")) {
			return d
		}
	}
	t.Fatal("no directory with PostgreSQL's server binaries (pg_controldata)")
	return ""
}

// freePorts returns n loopback ports free at the time of the call.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	var ls []net.Listener
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

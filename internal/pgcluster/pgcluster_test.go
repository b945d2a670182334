package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// startCluster starts a cluster for a test, skipping the test if there are no
// PostgreSQL binaries to start it with, and stops it at the end of the test.
func startCluster(ctx context.Context, t *testing.T) *Cluster {
	t.Helper()

	if _, err := FindBinDir(); err != nil {
		t.Skipf("skipping test that needs PostgreSQL binaries: %s", err)
	}

	cluster, err := Start(ctx, &Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop(context.Background())) })
	return cluster
}

// requireStopped checks that everything a stopped cluster had is gone.
func requireStopped(t *testing.T, cluster *Cluster) {
	t.Helper()

	_, err := os.Stat(cluster.dir)
	require.ErrorIs(t, err, fs.ErrNotExist)

	conn, err := net.DialTimeout("unix", filepath.Join(cluster.SocketDir(), ".s.PGSQL.5432"), time.Second)
	if err == nil {
		conn.Close()
	}
	require.Error(t, err, "expected the socket to refuse connections after Stop")
}

func TestCluster(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	t.Run("StartQueryStop", func(t *testing.T) {
		t.Parallel()

		cluster := startCluster(ctx, t)
		require.Regexp(t, `^postgres://postgres@/postgres\?host=%2F[^&]+&port=5432&sslmode=disable$`, cluster.URL())

		conn, err := pgx.Connect(ctx, cluster.URL())
		require.NoError(t, err)

		// The socket is the only way in: no TCP listener at all, and a
		// directory no other user can enter.
		var listen string
		require.NoError(t, conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen))
		require.Empty(t, listen)
		info, err := os.Stat(cluster.SocketDir())
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), info.Mode().Perm())

		var one int
		require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
		require.Equal(t, 1, one)

		_, err = conn.Exec(ctx, "CREATE TABLE widget (id bigint PRIMARY KEY, name text NOT NULL)")
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "INSERT INTO widget (id, name) VALUES (1, 'sprocket')")
		require.NoError(t, err)

		var name string
		require.NoError(t, conn.QueryRow(ctx, "SELECT name FROM widget WHERE id = 1").Scan(&name))
		require.Equal(t, "sprocket", name)

		// The connection is deliberately left open: Stop mustn't wait for
		// clients to disconnect.
		require.NoError(t, cluster.Stop(ctx))
		requireStopped(t, cluster)

		// Stop is idempotent.
		require.NoError(t, cluster.Stop(ctx))
		_ = conn.Close(ctx)
	})

	t.Run("StopWithCancelledContext", func(t *testing.T) {
		t.Parallel()

		cluster := startCluster(ctx, t)

		cancelledCtx, cancel := context.WithCancel(ctx)
		cancel()

		// pg_ctl can't even start with a cancelled context, so this
		// exercises killing the server directly.
		require.NoError(t, cluster.Stop(cancelledCtx))
		requireStopped(t, cluster)
	})

	t.Run("StartFailureCleansUp", func(t *testing.T) {
		t.Parallel()

		// A bin dir whose initdb always fails, echoing its arguments. Not
		// in t.TempDir, whose parent directory the postgres user can't
		// traverse when the tests run as root.
		binDir, err := os.MkdirTemp("", "fakepg-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(binDir) })
		require.NoError(t, os.Chmod(binDir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(binDir, "initdb"), []byte("#!/bin/sh\necho \"initdb: broken on purpose: $*\" >&2\nexit 1\n"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(binDir, "pg_ctl"), []byte("#!/bin/sh\nexit 1\n"), 0o755))

		_, err = Start(ctx, &Config{BinDir: binDir})
		require.ErrorContains(t, err, "error running initdb")
		require.ErrorContains(t, err, "broken on purpose")

		// The fake initdb echoes its arguments, which include the data
		// directory inside the cluster directory. The cluster directory
		// must be gone.
		match := regexp.MustCompile(`--pgdata=(\S+)`).FindStringSubmatch(err.Error())
		require.NotNil(t, match, "no data directory in error: %s", err)
		_, err = os.Stat(filepath.Dir(match[1]))
		require.ErrorIs(t, err, fs.ErrNotExist)
	})
}

// abandonEnv, when set, makes TestWatchdog start a cluster, print its
// directory and URL, and then hang until killed. It's how TestWatchdog runs a
// copy of the test binary that dies without calling Stop.
const abandonEnv = "PGCLUSTER_TEST_ABANDON_CLUSTER"

func TestWatchdog(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	if os.Getenv(abandonEnv) != "" {
		cluster, err := Start(ctx, nil)
		require.NoError(t, err)
		fmt.Println(cluster.dir, cluster.URL())
		select {} // wait to be killed
	}

	if _, err := FindBinDir(); err != nil {
		t.Skipf("skipping test that needs PostgreSQL binaries: %s", err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdog$")
	cmd.Env = append(os.Environ(), abandonEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var dir, url string
	_, err = fmt.Fscanln(stdout, &dir, &url)
	require.NoError(t, err)
	cluster := &Cluster{dir: dir, url: url}

	// The server is up and only the watchdog knows about it now.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	// SIGKILL gives the process no chance to clean up after itself.
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	require.Eventually(t, func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, fs.ErrNotExist)
	}, 30*time.Second, 50*time.Millisecond)
	requireStopped(t, cluster)
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()

	binDir, err := FindBinDir()
	if err != nil {
		t.Skipf("no PostgreSQL binaries: %s", err)
	}
	require.True(t, hasBinaries(binDir))

	output, err := exec.Command(filepath.Join(binDir, "pg_ctl"), "--version").Output()
	require.NoError(t, err)
	require.Contains(t, string(output), "PostgreSQL")
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()

	require.Equal(t, 1, compareVersions("10", "9.6"))
	require.Equal(t, -1, compareVersions("9.6", "15"))
	require.Equal(t, 0, compareVersions("15", "15"))
	require.Equal(t, 1, compareVersions("9.6", "9.5"))
}

func TestShellQuote(t *testing.T) {
	t.Parallel()

	output, err := exec.Command("/bin/sh", "-c", "printf %s "+shellQuote(`it's a "dir" $HOME`)).Output()
	require.NoError(t, err)
	require.Equal(t, `it's a "dir" $HOME`, string(output))
}

func TestRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := Start(ctx, &Config{CrashSafe: true})
	require.NoError(t, err)
	defer cluster.Stop(ctx) //nolint:errcheck

	conn, err := pgx.Connect(ctx, cluster.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)")
	require.NoError(t, err)

	require.NoError(t, cluster.Restart(ctx))
	// The old connection was cut; a new one finds the committed data.
	require.Error(t, conn.Ping(ctx))
	conn, err = pgx.Connect(ctx, cluster.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT n FROM kept").Scan(&n))
	require.Equal(t, 1, n)
}

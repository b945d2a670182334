package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// logTailBytes is how much of the end of the server log is included in
	// errors when the server fails to start.
	logTailBytes = 4096

	// stopTimeout bounds a graceful stop with pg_ctl before the server is
	// killed outright.
	stopTimeout = 30 * time.Second
)

// Config is configuration for Start.
type Config struct {
	// BinDir is the directory holding the initdb and pg_ctl binaries to use.
	//
	// Defaults to the directory found by FindBinDir.
	BinDir string

	// CrashSafe keeps synchronous_commit on, so that a commit that was
	// acknowledged survives a crash of the server (Restart). The cluster is
	// faster without it, and only fault tests need it. fsync stays off
	// either way: the operating system does not crash in a test.
	//
	// Defaults to false.
	CrashSafe bool

	// Settings are more server settings, "name=value" each, given on the
	// command line after the defaults (so they win): a small
	// max_connections, WAL archiving. Values are quoted for the shell.
	//
	// Defaults to none.
	Settings []string

	// Logger receives messages about the cluster's lifecycle.
	//
	// Defaults to a logger that discards everything.
	Logger *slog.Logger
}

// Cluster is a running throwaway PostgreSQL cluster started by Start. Its
// methods are safe for concurrent use.
type Cluster struct {
	binDir  string
	dataDir string
	dir     string
	logger  *slog.Logger
	url     string

	crashSafe bool
	settings  []string

	// credential is the user to run PostgreSQL binaries as, or nil to run
	// them as the current user.
	credential *syscall.Credential

	// watchdog is the process that cleans up the cluster if this process
	// exits without calling Stop, and watchdogPipe is the write end of its
	// stdin; see startWatchdog.
	watchdog     *exec.Cmd
	watchdogPipe *os.File

	mu      sync.Mutex
	stopped bool
}

// Start creates and starts a new throwaway PostgreSQL cluster, returning once
// it accepts connections. The cluster keeps running until Stop is called.
//
// On error, anything Start created has already been cleaned up.
func Start(ctx context.Context, config *Config) (*Cluster, error) {
	if config == nil {
		config = &Config{}
	}

	binDir := config.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}

	logger := config.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	credential, err := PostgresCredential()
	if err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		return nil, fmt.Errorf("error creating cluster directory: %w", err)
	}

	cluster := &Cluster{
		binDir:     binDir,
		credential: credential,
		dataDir:    filepath.Join(dir, "data"),
		dir:        dir,
		logger:     logger,
		crashSafe:  config.CrashSafe,
		settings:   config.Settings,
	}

	if err := cluster.start(ctx); err != nil {
		// Stop copes with a partially started cluster: it kills whatever
		// is running and removes the directory.
		if stopErr := cluster.Stop(context.WithoutCancel(ctx)); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("error cleaning up after failed start: %w", stopErr))
		}
		return nil, err
	}

	return cluster, nil
}

// start does the work of Start on a cluster whose directory exists.
func (c *Cluster) start(ctx context.Context) error {
	if c.credential != nil {
		if err := c.prepareDirForCredential(); err != nil {
			return err
		}
	}

	// Started before anything else so that even a crash in the middle of
	// Start doesn't leave the directory or a server behind.
	if err := c.startWatchdog(); err != nil {
		return err
	}

	initStart := time.Now()
	output, err := c.command(ctx, "initdb",
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		// Skips fsyncing the new data directory, which is most of initdb's
		// run time and pointless for a cluster that's thrown away.
		"--no-sync",
		"--pgdata="+c.dataDir,
		"--username=postgres",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("error running initdb: %w\n%s", err, bytes.TrimSpace(output))
	}
	c.logger.DebugContext(ctx, "pgcluster: initialized data directory", "data_dir", c.dataDir, "duration", time.Since(initStart))

	if err := c.startServer(ctx, socketPort); err != nil {
		return err
	}

	// pg_ctl -w has already waited for the server to report it's ready, but
	// a real connection makes sure the URL handed out actually works.
	if err := checkConnection(ctx, c.url); err != nil {
		return fmt.Errorf("error connecting to postgres: %w\n%s", err, c.logTail())
	}

	c.logger.InfoContext(ctx, "pgcluster: started postgres", "dir", c.dir, "url", c.url)
	return nil
}

// startServer starts the server on the given port with pg_ctl and waits for it
// to accept connections. On success it sets c.url.
func (c *Cluster) startServer(ctx context.Context, port int) error {
	// pg_ctl hands these to the server through a shell, hence the quoting.
	syncCommit := "off"
	if c.crashSafe {
		syncCommit = "on"
	}
	serverOptions := strings.Join([]string{
		"-p", strconv.Itoa(port),
		// No TCP listener: the socket in the cluster's 0700 directory is
		// the only way in (see the package documentation).
		"-h", "''",
		// The Unix socket goes in the cluster's own directory instead of
		// the default /var/run/postgresql, where it could collide with a
		// system cluster's or need privileges to create.
		"-k", shellQuote(c.dir),
		// Durability is useless for a cluster that's deleted after the
		// tests, and skipping it makes writes a lot faster. A crash loses
		// or corrupts data, which doesn't matter here.
		"-c", "fsync=off",
		"-c", "synchronous_commit=" + syncCommit,
		"-c", "full_page_writes=off",
		// Test suites open many connections at once: several pools, plus
		// listeners and per-test connections.
		"-c", "max_connections=300",
	}, " ")
	for _, setting := range c.settings {
		serverOptions += " -c " + shellQuote(setting)
	}

	// The server log (-l) also matters for another reason: without it the
	// server would inherit pg_ctl's stdout and stderr, and CombinedOutput
	// would wait on them until the server exits.
	output, err := c.command(ctx, "pg_ctl",
		"--log="+filepath.Join(c.dir, "log"),
		"--options="+serverOptions,
		"--pgdata="+c.dataDir,
		"--silent",
		"--wait",
		"start",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("error starting postgres: %w\n%s\n%s", err, bytes.TrimSpace(output), c.logTail())
	}

	c.url = (&url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Path:     "/postgres",
		RawQuery: url.Values{"host": {c.dir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}.Encode(),
	}).String()
	return nil
}

// URL returns a URL for connecting to the cluster's "postgres" database as the
// "postgres" superuser through its Unix socket, like
// "postgres://postgres@/postgres?host=%2Ftmp%2Fpgcluster-123&port=5432&sslmode=disable".
// No password is needed; only the user who started the cluster (and root)
// can reach the socket.
func (c *Cluster) URL() string { return c.url }

// SocketDir returns the directory that holds the cluster's Unix socket.
func (c *Cluster) SocketDir() string { return c.dir }

// socketPort names the socket file (.s.PGSQL.5432): with a directory of its
// own, any fixed number does, and none is ever bound on TCP.
const socketPort = 5432

// Stop shuts down the server immediately (without a checkpoint, as nothing in
// the cluster needs to survive) and removes the cluster's directory. It's safe
// to call more than once; calls after the first do nothing and return nil.
//
// The server is killed even if ctx is cancelled: ctx only bounds the graceful
// shutdown attempted first.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.stopped {
		return nil
	}
	c.stopped = true

	// Stopped first so it doesn't race with the cleanup below.
	c.stopWatchdog()

	var errs []error
	if err := c.stopServer(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := removeAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("error removing cluster directory: %w", err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	c.logger.InfoContext(ctx, "pgcluster: stopped postgres", "dir", c.dir)
	return nil
}

// Restart restarts the server the way a crash and a restart would: an
// immediate shutdown (every connection is cut, nothing is checkpointed) and
// a start on the same port, returning once it accepts connections again.
// It is for fault tests.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("pgcluster: cluster is stopped")
	}
	// pg_ctl restart starts the server with the options of its last start,
	// which it keeps in postmaster.opts.
	output, err := c.command(ctx, "pg_ctl",
		"--log="+filepath.Join(c.dir, "log"),
		"--mode=immediate",
		"--pgdata="+c.dataDir,
		"--silent",
		"--wait",
		"restart",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("error restarting postgres: %w\n%s\n%s", err, bytes.TrimSpace(output), c.logTail())
	}
	return nil
}

// stopServer stops the server if it's running, first with pg_ctl and, if that
// fails, by killing it.
func (c *Cluster) stopServer(ctx context.Context) error {
	if !c.serverMayBeRunning() {
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()

	output, err := c.command(ctx, "pg_ctl",
		"--mode=immediate",
		"--pgdata="+c.dataDir,
		"--silent",
		"--wait",
		"stop",
	).CombinedOutput()
	if err == nil || !c.serverMayBeRunning() {
		return nil
	}
	c.logger.WarnContext(ctx, "pgcluster: pg_ctl stop failed; killing postgres",
		"error", err, "output", string(bytes.TrimSpace(output)))

	if err := c.killServer(); err != nil {
		return fmt.Errorf("error stopping postgres: %w", err)
	}
	return nil
}

// serverMayBeRunning returns true if the data directory has a postmaster.pid
// file, which the server creates on start and removes when it exits cleanly.
func (c *Cluster) serverMayBeRunning() bool {
	_, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid"))
	return !errors.Is(err, fs.ErrNotExist)
}

// killServer sends SIGKILL to the server's postmaster and waits a little for it
// to exit. Its child processes notice it's gone and exit on their own.
func (c *Cluster) killServer() error {
	pidFile, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("error reading postmaster.pid: %w", err)
	}
	firstLine, _, _ := strings.Cut(string(pidFile), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(firstLine))
	if err != nil || pid <= 0 {
		return fmt.Errorf("error parsing postmaster.pid: unexpected first line %q", firstLine)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("error killing postmaster (pid %d): %w", pid, err)
	}

	// The postmaster isn't our child (pg_ctl detaches it), so it can't be
	// waited for; poll until it's gone instead.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if !processRunning(pid) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("postmaster (pid %d) still running after SIGKILL", pid)
}

// processRunning returns true if the process pid exists and isn't a zombie.
//
// Zombies count as gone because a killed postmaster stays one until whatever
// inherited it (init, or a container's PID 1) gets around to reaping it, which
// can take a while, and a zombie holds no ports or files. Zombies are only
// detected where /proc exists (Linux); elsewhere they count as running.
func processRunning(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The format is "pid (comm) state ...", and comm can contain anything,
	// including spaces and parentheses, so look after the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 0 && fields[0] == "Z" {
			return false
		}
	}
	return true
}

// checkConnection connects to url and runs a trivial query.
func checkConnection(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)

	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// logTail returns the end of the server log, for error messages.
func (c *Cluster) logTail() string {
	log, err := os.ReadFile(filepath.Join(c.dir, "log"))
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	if len(log) > logTailBytes {
		log = log[len(log)-logTailBytes:]
		// Start at a line boundary so the first line isn't cut in half.
		if i := bytes.IndexByte(log, '\n'); i >= 0 {
			log = log[i+1:]
		}
	}
	return "server log:\n" + string(bytes.TrimSpace(log))
}

// removeAll removes dir, retrying briefly because server processes that are
// still exiting can create files while it's being removed.
func removeAll(dir string) error {
	var err error
	for range 10 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

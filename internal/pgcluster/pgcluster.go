// Package pgcluster starts throwaway PostgreSQL clusters for tests.
//
// A cluster lives in a fresh temporary directory: its data directory, server
// log, and Unix socket are all inside it. It listens on that socket only, with
// no TCP listener at all: it runs with trust authentication and a superuser,
// and the directory's 0700 mode is what keeps other local users out (over
// TCP, any of them could connect and run COPY ... TO PROGRAM as the user who
// started it). A directory of its own also means it never collides with a
// system cluster or with other throwaway clusters. It's tuned for speed rather than durability (fsync is
// off) and is deleted entirely by Stop.
//
// PostgreSQL refuses to run as root, so when the current process is root the
// server binaries are run as the unprivileged "postgres" user instead.
//
// The server runs detached from the calling process (pg_ctl puts it in its own
// session), so it can't simply die with its parent. Stop is the normal way of
// shutting it down, but as a safety net every cluster also has a small
// watchdog process that stops the server and removes its directory when the
// process that started it exits without calling Stop (a crash, a test binary
// killed by a timeout, Ctrl-C). Only something that also kills the watchdog,
// like SIGKILL sent to every process at once, can leave a cluster behind.
package pgcluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// debianBinGlob matches the binary directories of every PostgreSQL
	// version installed from Debian/Ubuntu packages, which don't put initdb
	// or pg_ctl on PATH.
	debianBinGlob = "/usr/lib/postgresql/*/bin"

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

	credential, err := postgresCredential()
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

// startWatchdog starts a process that stops the server and removes the cluster
// directory as soon as this process exits without calling Stop.
//
// It works by waiting to read from a pipe whose only write end is held by this
// process: when this process exits, however abruptly, the kernel closes the
// write end and the read returns EOF. The watchdog runs in its own process
// group so that a Ctrl-C delivered to the test's process group doesn't kill it
// along with the test binary, and as the same user as the server so it's
// allowed to stop it.
func (c *Cluster) startWatchdog() error {
	readEnd, writeEnd, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("error creating watchdog pipe: %w", err)
	}
	defer readEnd.Close() // the watchdog has its own copy once started

	const script = `read -r _; "$0" --mode=immediate --pgdata="$1" --silent --wait stop; rm -rf "$2"`

	// Stdout and stderr are deliberately left unset (/dev/null): if the
	// watchdog held the test binary's stdout, `go test` would wait for it to
	// exit before finishing.
	cmd := exec.Command("/bin/sh", "-c", script,
		filepath.Join(c.binDir, "pg_ctl"), c.dataDir, c.dir)
	cmd.Dir = c.dir
	cmd.Stdin = readEnd
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.credential, Setpgid: true}
	if err := cmd.Start(); err != nil {
		writeEnd.Close()
		return fmt.Errorf("error starting watchdog: %w", err)
	}

	c.watchdog = cmd
	c.watchdogPipe = writeEnd
	return nil
}

// stopWatchdog kills the watchdog without letting it clean up, for when the
// cluster is being stopped normally.
func (c *Cluster) stopWatchdog() {
	if c.watchdog == nil {
		return
	}
	// Errors are ignored: the only way these fail is if the watchdog is
	// already gone, which is what's wanted.
	_ = c.watchdog.Process.Kill()
	_ = c.watchdog.Wait()
	_ = c.watchdogPipe.Close()
	c.watchdog = nil
}

// command returns a command running one of the PostgreSQL binaries as the
// user that owns the cluster.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	// The current directory might not be readable by the postgres user
	// (e.g. /root), which makes the binaries print warnings or fail.
	cmd.Dir = c.dir
	if c.credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.credential}
	}
	return cmd
}

// prepareDirForCredential hands the cluster directory over to the user that
// will run the server, and makes sure that user can reach it.
func (c *Cluster) prepareDirForCredential() error {
	uid, gid := int(c.credential.Uid), int(c.credential.Gid)

	// Only the directory itself exists at this point, but walking keeps this
	// correct if anything is ever created in it before the hand over.
	err := filepath.WalkDir(c.dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("error changing owner of cluster directory: %w", err)
	}
	// os.MkdirTemp already creates it 0700, but the server insists on it
	// not being accessible by anyone else, so don't depend on that.
	if err := os.Chmod(c.dir, 0o700); err != nil {
		return fmt.Errorf("error changing mode of cluster directory: %w", err)
	}

	// The directory is useless to the postgres user if it can't traverse
	// its parents, which happens if TMPDIR is set to somewhere like /root.
	for parent := filepath.Dir(c.dir); ; parent = filepath.Dir(parent) {
		if err := checkTraversable(parent, uid, gid); err != nil {
			return fmt.Errorf("cluster directory is not reachable by the postgres user (set TMPDIR to a world-accessible directory): %w", err)
		}
		if next := filepath.Dir(parent); next == parent {
			break
		}
	}
	return nil
}

// checkTraversable returns an error unless the user uid with primary group gid
// has search (execute) permission on dir according to its mode bits. ACLs and
// supplementary groups are ignored, so it can err on the side of failing.
func checkTraversable(dir string, uid, gid int) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	stat, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // can't tell; let the PostgreSQL binaries find out
	}

	mode := info.Mode().Perm()
	var permitted bool
	switch {
	case int(stat.Uid) == uid:
		permitted = mode&0o100 != 0
	case int(stat.Gid) == gid:
		permitted = mode&0o010 != 0
	default:
		permitted = mode&0o001 != 0
	}
	if !permitted {
		return fmt.Errorf("no search permission on %s (mode %s)", dir, mode)
	}
	return nil
}

// postgresCredential returns the credential to run PostgreSQL binaries with:
// nil when not running as root, and the "postgres" user otherwise, because
// initdb, pg_ctl, and the server all refuse to run as root.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}

	postgresUser, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("error looking up postgres user (PostgreSQL can't run as root, so a postgres user is needed): %w", err)
	}
	uid, err := strconv.ParseUint(postgresUser.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("error parsing uid of postgres user: %w", err)
	}
	gid, err := strconv.ParseUint(postgresUser.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("error parsing gid of postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FindBinDir returns the directory holding the initdb and pg_ctl binaries.
//
// It looks for initdb on PATH first, expecting pg_ctl next to it (or next to
// the file it links to). Failing that, it falls back to the highest version
// under /usr/lib/postgresql/*/bin, where Debian and Ubuntu install the
// binaries without putting them on PATH.
func FindBinDir() (string, error) {
	if initdbPath, err := exec.LookPath("initdb"); err == nil {
		candidates := []string{filepath.Dir(initdbPath)}
		if resolved, err := filepath.EvalSymlinks(initdbPath); err == nil {
			candidates = append(candidates, filepath.Dir(resolved))
		}
		for _, dir := range candidates {
			if hasBinaries(dir) {
				return dir, nil
			}
		}
	}

	dirs, err := filepath.Glob(debianBinGlob)
	if err != nil {
		return "", fmt.Errorf("error listing PostgreSQL installations: %w", err)
	}
	// Highest version first, compared numerically so "10" beats "9.6".
	slices.SortFunc(dirs, func(a, b string) int {
		return -compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, dir := range dirs {
		if hasBinaries(dir) {
			return dir, nil
		}
	}

	return "", errors.New("no PostgreSQL binaries found: initdb and pg_ctl are neither on PATH nor in " + debianBinGlob)
}

// compareVersions compares dotted version numbers like "9.6" and "15"
// numerically, part by part. Parts that aren't numbers compare as zero.
func compareVersions(a, b string) int {
	aParts, bParts := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(aParts), len(bParts)) {
		var aNum, bNum int
		if i < len(aParts) {
			aNum, _ = strconv.Atoi(aParts[i])
		}
		if i < len(bParts) {
			bNum, _ = strconv.Atoi(bParts[i])
		}
		if c := cmp.Compare(aNum, bNum); c != 0 {
			return c
		}
	}
	return 0
}

// hasBinaries returns true if dir contains executable initdb and pg_ctl files.
func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
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

package pgcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

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

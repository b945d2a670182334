package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// sibling returns a cluster like c in a directory of its own, its data
// directory not created: a standby's, a backup's or a restore's. It runs
// the binaries pg_ctl really sits among, since pg_basebackup is there and
// PATH may hold only a link to pg_ctl (/usr/local/bin/pg_ctl ->
// /usr/lib/postgresql/15/bin).
func (c *Cluster) sibling() (*Cluster, error) {
	dir, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		return nil, fmt.Errorf("error creating cluster directory: %w", err)
	}
	binDir := c.binDir
	if real, err := filepath.EvalSymlinks(filepath.Join(c.binDir, "pg_ctl")); err == nil {
		binDir = filepath.Dir(real)
	}
	return &Cluster{
		binDir:     binDir,
		credential: c.credential,
		dataDir:    filepath.Join(dir, "data"),
		dir:        dir,
		logger:     c.logger,
		crashSafe:  c.crashSafe,
	}, nil
}

// StartStandby creates a streaming standby of c, for failover tests: a base
// backup taken with pg_basebackup -R (which writes standby.signal and the
// primary_conninfo that streams from c), started as a cluster of its own in
// a directory of its own, returning once it accepts (read-only)
// connections. Stop it like any cluster.
func (c *Cluster) StartStandby(ctx context.Context) (*Cluster, error) {
	s, err := c.sibling()
	if err != nil {
		return nil, err
	}
	if err := s.startStandby(ctx, c); err != nil {
		if stopErr := s.Stop(context.WithoutCancel(ctx)); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("error cleaning up after failed start: %w", stopErr))
		}
		return nil, err
	}
	return s, nil
}

func (c *Cluster) startStandby(ctx context.Context, primary *Cluster) error {
	// standby.signal and primary_conninfo, pointing at the primary's
	// socket.
	if err := c.baseBackupFrom(ctx, primary, "--write-recovery-conf"); err != nil {
		return err
	}
	if err := c.startServer(ctx, socketPort); err != nil {
		return err
	}
	if err := checkConnection(ctx, c.url); err != nil {
		return fmt.Errorf("error connecting to the standby: %w\n%s", err, c.logTail())
	}
	c.logger.InfoContext(ctx, "pgcluster: started standby", "dir", c.dir, "primary", primary.dir)
	return nil
}

// StopImmediate stops the server the way a crash of its host would look to
// its clients (pg_ctl stop -m immediate: every connection cut, nothing
// checkpointed), and leaves it stopped: for failover tests. Stop still
// removes the cluster.
func (c *Cluster) StopImmediate(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	output, err := c.command(ctx, "pg_ctl", "--mode=immediate", "--pgdata="+c.dataDir, "--silent", "--wait", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("error stopping postgres: %w\n%s", err, bytes.TrimSpace(output))
	}
	return nil
}

// Promote promotes a standby to a primary and returns once it accepts
// writes.
func (c *Cluster) Promote(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	output, err := c.command(ctx, "pg_ctl", "--pgdata="+c.dataDir, "--silent", "--wait", "promote").CombinedOutput()
	if err != nil {
		return fmt.Errorf("error promoting postgres: %w\n%s\n%s", err, bytes.TrimSpace(output), c.logTail())
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		conn, err := pgx.Connect(ctx, c.url)
		if err == nil {
			var inRecovery bool
			err = conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery)
			conn.Close(ctx)
			if err == nil && !inRecovery {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("standby still in recovery 30 s after its promotion: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// baseBackupFrom makes c's data directory a base backup of from (its
// watchdog started first, so a failed backup leaves no orphan), with
// pg_basebackup's extra options.
func (c *Cluster) baseBackupFrom(ctx context.Context, from *Cluster, extra ...string) error {
	if c.credential != nil {
		if err := c.prepareDirForCredential(); err != nil {
			return err
		}
	}
	if err := c.startWatchdog(); err != nil {
		return err
	}
	args := append([]string{
		"--pgdata=" + c.dataDir,
		"--host=" + from.dir,
		fmt.Sprintf("--port=%d", socketPort),
		"--username=postgres",
		"--wal-method=stream",
		"--checkpoint=fast",
		"--no-sync",
	}, extra...)
	output, err := c.command(ctx, "pg_basebackup", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("error running pg_basebackup: %w\n%s", err, bytes.TrimSpace(output))
	}
	return nil
}

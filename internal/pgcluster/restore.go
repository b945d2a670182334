package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// MakeArchiveDir makes a directory a cluster's server may write WAL into
// (archive_command) and a restored cluster's may read from
// (restore_command), owned by the user the binaries run as; the caller
// removes it. Give it to Config.Settings as "archive_mode=on" and
// "archive_command=cp %p DIR/%f".
func MakeArchiveDir() (string, error) {
	dir, err := os.MkdirTemp("", "pgcluster-archive-")
	if err != nil {
		return "", fmt.Errorf("error creating archive directory: %w", err)
	}
	credential, err := PostgresCredential()
	if err != nil {
		return "", err
	}
	if credential != nil {
		if err := os.Chown(dir, int(credential.Uid), int(credential.Gid)); err != nil {
			return "", fmt.Errorf("error changing owner of archive directory: %w", err)
		}
	}
	return dir, nil
}

// BaseBackup takes a base backup of c with pg_basebackup (the WAL needed
// to make it consistent streamed along), for restore tests: a cluster of
// its own, in a directory of its own, not started. Start it with
// StartRecovery; Stop removes it either way.
func (c *Cluster) BaseBackup(ctx context.Context) (*Cluster, error) {
	b, err := c.sibling()
	if err != nil {
		return nil, err
	}
	err = b.baseBackupFrom(ctx, c)
	if err != nil {
		if stopErr := b.Stop(context.WithoutCancel(ctx)); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("error cleaning up after failed backup: %w", stopErr))
		}
		return nil, err
	}
	return b, nil
}

// NewRestoreTarget returns a cluster like c, not started, whose data
// directory (DataDir) does not exist yet: for a restore tool such as
// pgBackRest to create, as the user the binaries run as. Start it with
// StartRecovery; Stop removes it either way.
func (c *Cluster) NewRestoreTarget() (*Cluster, error) {
	b, err := c.sibling()
	if err != nil {
		return nil, err
	}
	err = func() error {
		if b.credential != nil {
			if err := b.prepareDirForCredential(); err != nil {
				return err
			}
		}
		return b.startWatchdog()
	}()
	if err != nil {
		if stopErr := b.Stop(context.WithoutCancel(context.Background())); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("error cleaning up: %w", stopErr))
		}
		return nil, err
	}
	return b, nil
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// SocketPort is the port number of the cluster's Unix socket (in
// SocketDir), for tools that take a directory and a port.
const SocketPort = socketPort

// StartRecovery starts a cluster made by BaseBackup as a point-in-time
// recovery: recovery.signal, then the server with settings (a
// restore_command, a recovery_target_time, ...) and recovery_target_action
// promote, returning once recovery ended and it accepts writes.
func (c *Cluster) StartRecovery(ctx context.Context, settings ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	signal := filepath.Join(c.dataDir, "recovery.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return fmt.Errorf("error writing recovery.signal: %w", err)
	}
	if c.credential != nil {
		if err := os.Chown(signal, int(c.credential.Uid), int(c.credential.Gid)); err != nil {
			return fmt.Errorf("error changing owner of recovery.signal: %w", err)
		}
	}
	c.settings = append(append([]string{}, settings...), "recovery_target_action=promote")
	if err := c.startServer(ctx, socketPort); err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
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
			if err == nil {
				err = errors.New("pg_is_in_recovery() is still true")
			}
			return fmt.Errorf("still in recovery after 60 s: %w\n%s", err, c.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

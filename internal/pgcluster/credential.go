package pgcluster

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

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

// PostgresCredential returns the credential to run PostgreSQL binaries with:
// nil when not running as root, and the "postgres" user otherwise, because
// initdb, pg_ctl, and the server all refuse to run as root (as do
// PgBouncer, Patroni and pgBackRest, which the integration tests start).
func PostgresCredential() (*syscall.Credential, error) {
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

package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotASession is a connection found not to be a session of its own: its
// statements ran on different backends, as behind a transaction pooler,
// where the process's liveness lock would stay on a server connection
// other clients use after the process died, and a LISTEN hears nothing.
var ErrNotASession = errors.New("dispatcher: the liveness connection is not a session of its own (its backend changed between two statements): the pool goes through a transaction pooler; give the dispatcher PollOnly and a SessionPool that is direct or session-pooled (docs/operations.md, \"Behind PgBouncer\")")

// sessionProbes is how many other connections checkSession opens, at most,
// each holding a transaction.
const sessionProbes = 4

// sessionProbeTimeout bounds each of checkSession's statements.
const sessionProbeTimeout = 3 * time.Second

// CheckSession reports ErrNotASession when pool's connections are not
// sessions of their own (a transaction pooler's), as the dispatcher checks
// its liveness connection at Start: for a caller to refuse such a pool
// before it does anything else.
func CheckSession(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return checkSession(ctx, conn.Conn(), &pool.Config().ConnConfig.Config)
}

// checkSession reports ErrNotASession when conn's statements do not all
// run on one backend. Between two of conn's statements it begins
// transactions on up to sessionProbes connections of its own made with
// config. A pooler lends a server connection to one transaction at a time,
// the one conn just used among the first (PgBouncer hands out the most
// recently used first): a transaction then runs on conn's backend, or
// conn's next statement runs on another, or waits for one (a pooler with
// every server connection lent). A direct connection, or a session-mode
// pooler's, never changes backend, so the check never refuses one; when a
// probe cannot connect or answer, it stops probing and judges on what it
// saw. The statements go by the simple protocol: a pooler would lose a
// prepared one before the check could say why.
func checkSession(ctx context.Context, conn *pgx.Conn, config *pgconn.Config) error {
	first, err := backendPID(ctx, conn.PgConn(), "SELECT pg_backend_pid()")
	if err != nil {
		return fmt.Errorf("error checking the session: %w", err)
	}
	var probes []*pgconn.PgConn
	defer func() {
		// Ending a probe's connection ends its transaction.
		for _, p := range probes {
			_ = p.Close(context.WithoutCancel(ctx))
		}
	}()
	for range sessionProbes {
		pctx, cancel := context.WithTimeout(ctx, sessionProbeTimeout)
		p, err := pgconn.ConnectConfig(pctx, config)
		if err != nil {
			cancel()
			break
		}
		probes = append(probes, p)
		pid, err := backendPID(pctx, p, "BEGIN; SELECT pg_backend_pid()")
		cancel()
		if err != nil {
			break
		}
		if pid == first {
			return ErrNotASession
		}
	}
	sctx, cancel := context.WithTimeout(ctx, sessionProbeTimeout)
	defer cancel()
	second, err := backendPID(sctx, conn.PgConn(), "SELECT pg_backend_pid()")
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		// A backend of its own answers this at once; a pooler's client
		// waits for a server connection the probes hold.
		return ErrNotASession
	case err != nil:
		return fmt.Errorf("error checking the session: %w", err)
	case second != first:
		return ErrNotASession
	}
	return nil
}

// backendPID runs sql by the simple protocol and returns the value of its
// last result's first row.
func backendPID(ctx context.Context, c *pgconn.PgConn, sql string) (string, error) {
	results, err := c.Exec(ctx, sql).ReadAll()
	if err != nil {
		return "", err
	}
	last := results[len(results)-1]
	if len(last.Rows) == 0 {
		return "", errors.New("no row")
	}
	return string(last.Rows[0][0]), nil
}

// Package dbutil holds the one transaction helper the packages share, after
// River's dbutil.WithTxV.
package dbutil

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Beginner begins transactions: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx
// (whose Begin makes a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// WithTxV runs fn in a transaction begun on db and commits it when fn
// succeeds, returning fn's value.
func WithTxV[T any](ctx context.Context, db Beginner, fn func(tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := db.Begin(ctx)
	if err != nil {
		return zero, fmt.Errorf("error beginning transaction: %w", err)
	}
	// Rolls back on every path but a successful commit, where it is a no-op;
	// WithoutCancel, so that a cancelled ctx still releases the connection
	// cleanly.
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	res, err := fn(tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, fmt.Errorf("error committing transaction: %w", err)
	}
	return res, nil
}

// Defaults of the session timeouts serve sets on every connection
// (OUTBOX_STATEMENT_TIMEOUT, OUTBOX_LOCK_TIMEOUT).
const (
	// StatementTimeoutDefault bounds any one statement: far above what
	// outbox's statements take (milliseconds), so that only a database
	// that is stuck (a full disk's retries, I/O stalls, a runaway plan)
	// reaches it; a worker or a request then gets an error instead of
	// waiting forever, and the connection goes back to the pool.
	StatementTimeoutDefault = 30 * time.Second
	// LockTimeoutDefault bounds a statement's wait for a lock: a migration
	// or an operator's transaction holding the intent table makes
	// enqueues fail with 503 unavailable after this, rather than pinning
	// every worker and request behind it.
	LockTimeoutDefault = 10 * time.Second
)

// SetSessionTimeouts makes every connection of the pool made with config
// begin its session with statement_timeout and lock_timeout (0 leaves the
// server's setting). They are set by a statement right after connecting,
// not as startup parameters: a pooler (PgBouncer, in any pool mode) refuses
// a startup parameter it does not know and closes the connection. They hold
// for the whole session, whatever runs on it (River's own queries included);
// a transaction may still change them for itself with SET LOCAL.
//
// Behind a transaction pooler a session is not the client's, and a SET would
// stay on whichever server connection ran it: there the timeouts belong to
// the role (ALTER ROLE ... SET, docs/operations.md "Behind PgBouncer"), and
// callers do not call this.
func SetSessionTimeouts(config *pgxpool.Config, statement, lock time.Duration) {
	var sets []string
	if statement > 0 {
		sets = append(sets, "set_config('statement_timeout', '"+strconv.FormatInt(max(1, statement.Milliseconds()), 10)+"', false)")
	}
	if lock > 0 {
		sets = append(sets, "set_config('lock_timeout', '"+strconv.FormatInt(max(1, lock.Milliseconds()), 10)+"', false)")
	}
	if len(sets) == 0 {
		return
	}
	sql := "SELECT " + strings.Join(sets, ", ")
	afterConnect := config.AfterConnect
	config.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if afterConnect != nil {
			if err := afterConnect(ctx, conn); err != nil {
				return err
			}
		}
		// No arguments: one simple-protocol round trip, whatever the
		// connection's exec mode.
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("error setting the session's timeouts: %w", err)
		}
		return nil
	}
}

// Package dbutil holds the one transaction helper the packages share, after
// River's dbutil.WithTxV.
package dbutil

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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

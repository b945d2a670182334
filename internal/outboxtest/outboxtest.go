// Package outboxtest gives tests a migrated outbox schema of their own on the
// test database (see package testdb).
package outboxtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/migrations"
)

// Schema creates a fresh schema, applies River's and outbox's migrations to
// it, and returns the package's shared pool and the schema's name. The
// schema is dropped when the test ends.
func Schema(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool := testdb.Pool(tb)
	schema := testdb.Schema(tb)
	migrator, err := migrations.New(pool, schema)
	if err != nil {
		tb.Fatalf("error creating migrator: %v", err)
	}
	if _, err := migrator.Up(context.Background()); err != nil {
		tb.Fatalf("error migrating schema %s: %v", schema, err)
	}
	return pool, schema
}

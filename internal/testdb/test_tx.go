package testdb

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

var (
	txSchemaMu sync.Mutex
	// txSchema is the migrated schema TestTx's transactions share, created
	// by the first and dropped by Run with the others.
	txSchema *migratedSchema
)

// TestTx begins a transaction in the test binary's one migrated schema
// shared by every TestTx, and rolls it back when the test ends; it returns
// the transaction and the schema's name. The transaction's search_path is
// the schema, so unqualified names in a test's SQL find its tables.
//
// It is the cheapest way to a migrated schema, for tests that need neither
// a commit nor LISTEN/NOTIFY (nothing outside the transaction sees its
// rows: not a dispatcher, not another connection). Tests in parallel share
// the schema's tables: two transactions writing the same key, or the drain's
// one offset row, wait for each other, so such tests use keys or namespaces
// of their own, or MigratedSchema.
func TestTx(ctx context.Context, tb testing.TB) (pgx.Tx, string) {
	tb.Helper()
	pool := Pool(tb)

	txSchemaMu.Lock()
	if txSchema == nil {
		s, err := newMigratedSchema(pool)
		if err != nil {
			txSchemaMu.Unlock()
			tb.Fatalf("testdb: %v", err)
		}
		txSchema = s
		schemasMigrated.Add(1)
	}
	schema := txSchema.name
	txSchemaMu.Unlock()

	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatalf("testdb: error beginning test transaction: %v", err)
	}
	tb.Cleanup(func() {
		// The test's context may be cancelled by now: the rollback is
		// what's left to do either way.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		// A test may end its transaction itself, or a cancelled query may
		// have closed its connection (pgx then rolls back).
		if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) && !tx.Conn().IsClosed() {
			tb.Errorf("testdb: error rolling back test transaction: %v", err)
		}
	})
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("testdb: error setting search_path: %v", err)
	}
	return tx, schema
}

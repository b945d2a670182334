package outboxtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/migrations"
)

// schemaPrefix begins the names of MigrateSchema's schemas, so that one left
// behind by a killed test is recognisable.
const schemaPrefix = "outboxtest_"

// cleanupTimeout bounds the drop of a schema. The cleanup cannot use the
// test's context, which has ended by then.
const cleanupTimeout = 30 * time.Second

// MigrateSchema creates a schema with a new random name in pool's database,
// applies River's and outbox's migrations to it (migrations.Migrator.Up),
// drops it when the test ends, and returns its name. Give the name to
// outbox.Config.Schema and dispatcher.Config.Schema: each test then has
// tables of its own, and tests run in parallel.
func MigrateSchema(ctx context.Context, tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	schema := randomSchema()
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		tb.Fatalf("outboxtest: error creating migrator: %s", err)
	}
	// Registered before Up, which creates the schema, so that a schema a
	// failed Up left half migrated is dropped too.
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := dropSchema(ctx, pool, schema); err != nil {
			tb.Errorf("outboxtest: error dropping schema %s: %s", schema, err)
		}
	})
	if _, err := migrator.Up(ctx); err != nil {
		tb.Fatalf("outboxtest: error migrating schema %s: %s", schema, err)
	}
	return schema
}

// dropSchema drops schema and everything in it. A dispatcher may still be
// writing its last outcomes in it, so a deadlock with it is tried again.
func dropSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var err error
	for range 5 {
		_, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.DeadlockDetected {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// randomSchema returns a schema name: schemaPrefix and random lowercase
// letters and digits. It is short because schema names are part of
// notification channels' names, which PostgreSQL limits to 63 bytes.
func randomSchema() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var name strings.Builder
	name.WriteString(schemaPrefix)
	for range 10 {
		name.WriteByte(alphabet[rand.IntN(len(alphabet))]) //nolint:gosec // a unique name, not a secret
	}
	return name.String()
}

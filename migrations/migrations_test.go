package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/migrations"
)

func TestMigratorUp(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	// A migrator's connections may have seen the schema missing before Up
	// creates it: a program that checks its schema before migrating, or
	// serve with OUTBOX_AUTO_MIGRATE reading the migration state first.
	t.Run("AfterTheSchemaWasSeenMissing", func(t *testing.T) {
		t.Parallel()

		pool, err := pgxpool.New(ctx, testdb.URL(t))
		require.NoError(t, err)
		t.Cleanup(pool.Close)

		// A schema that never existed: looking it up leaves the
		// connection with a cached "no such schema".
		schema := fmt.Sprintf("mig_%d", time.Now().UnixNano())
		t.Cleanup(func() {
			_, err := pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			require.NoError(t, err)
		})
		_, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
		m, err := migrations.New(pool, schema)
		require.NoError(t, err)
		_, err = m.Up(ctx)
		require.NoError(t, err)
		st, err := m.Status(ctx)
		require.NoError(t, err)
		require.True(t, st.UpToDate())
	})

	// A server whose default isolation is not READ COMMITTED migrates too
	// (007 compiles the stored approval rules, which a change of the rules
	// may only do in READ COMMITTED).
	t.Run("SerializableByDefault", func(t *testing.T) {
		t.Parallel()

		cfg, err := pgxpool.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		schema := fmt.Sprintf("mig_ser_%d", time.Now().UnixNano())
		t.Cleanup(func() {
			_, err := pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			require.NoError(t, err)
		})
		m, err := migrations.New(pool, schema)
		require.NoError(t, err)
		_, err = m.Up(ctx)
		require.NoError(t, err)
		var level string
		require.NoError(t, pool.QueryRow(ctx, "SHOW transaction_isolation").Scan(&level))
		require.Equal(t, "serializable", level)
	})

	t.Run("TwiceIsANoOp", func(t *testing.T) {
		t.Parallel()

		pool, schema := testdb.MigratedSchema(t)
		m, err := migrations.New(pool, schema)
		require.NoError(t, err)
		res, err := m.Up(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Applied)
	})
}

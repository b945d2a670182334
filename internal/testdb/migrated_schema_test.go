package testdb_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// TestMigratedSchema runs alone (no t.Parallel), so that the schema one
// subtest hands back is the one the next gets.
func TestMigratedSchema(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t)

	schemaExists := func(t *testing.T, schema string) bool {
		t.Helper()
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
		return exists
	}
	count := func(t *testing.T, schema, table string) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n))
		return n
	}
	enqueue := func(t *testing.T, schema string) int64 {
		t.Helper()
		client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
		require.NoError(t, err)
		res, err := client.Enqueue(ctx, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		return res.Intent.ID
	}

	var first string
	t.Run("Dirty", func(t *testing.T) {
		_, first = testdb.MigratedSchema(t)
		require.Regexp(t, namePattern, first)
		require.Equal(t, int64(1), enqueue(t, first))
		client, err := outbox.NewClient(pool, &outbox.Config{Schema: first})
		require.NoError(t, err)
		require.NoError(t, client.SetApprovalRules(ctx, []outbox.ApprovalRule{{Effect: "noop"}}))
	})

	t.Run("ReusedEmpty", func(t *testing.T) {
		_, schema := testdb.MigratedSchema(t)
		require.Equal(t, first, schema, "the schema handed back is reused")
		require.Zero(t, count(t, schema, "outbox_intent"))
		require.Zero(t, count(t, schema, "outbox_approval_rule"))
		require.Equal(t, 1, count(t, schema, "outbox_drain_offset"), "the migrations' own rows are put back")
		require.Equal(t, int64(1), enqueue(t, schema), "identities restart")

		// The approval trigger was rebuilt for no rules: the intent runs.
		var state string
		require.NoError(t, pool.QueryRow(ctx, "SELECT state FROM "+pgx.Identifier{schema, "outbox_intent"}.Sanitize()).Scan(&state))
		require.Equal(t, "pending", state)

		var rows int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_migration"}.Sanitize()).Scan(&rows))
		require.NotZero(t, rows, "River's migrations stay recorded")
	})

	t.Run("ChangedIsDropped", func(t *testing.T) {
		_, schema := testdb.MigratedSchema(t)
		require.Equal(t, first, schema)
		_, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "widget"}.Sanitize()+" (id bigint)")
		require.NoError(t, err)
	})
	require.False(t, schemaExists(t, first), "a schema whose objects changed is dropped")

	t.Run("New", func(t *testing.T) {
		_, schema := testdb.MigratedSchema(t)
		require.NotEqual(t, first, schema)
		require.Zero(t, count(t, schema, "outbox_intent"))
	})
}

func TestTestTx(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := testdb.Pool(t)

	var schema string
	t.Run("RolledBack", func(t *testing.T) {
		var tx pgx.Tx
		tx, schema = testdb.TestTx(ctx, t)
		client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
		require.NoError(t, err)
		_, err = client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "test-tx", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)

		var n int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM outbox_intent WHERE key = 'test-tx'").Scan(&n))
		require.Equal(t, 1, n, "search_path is the schema")
	})

	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "outbox_intent"}.Sanitize()+" WHERE key = 'test-tx'").Scan(&n))
	require.Zero(t, n, "the transaction was rolled back")

	t.Run("SameSchema", func(t *testing.T) {
		tx, other := testdb.TestTx(ctx, t)
		require.Equal(t, schema, other)
		require.NoError(t, tx.Rollback(ctx), "a test may end it itself")
	})
}

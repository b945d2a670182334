package intentdb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/testdb"
)

type testBundle struct {
	pool    *pgxpool.Pool
	queries *intentdb.Queries
	schema  string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, schema := testdb.MigratedSchema(t)
	return &testBundle{pool: pool, queries: intentdb.New(schema), schema: schema}
}

// traceparent reads the traceparent column of key's intent, nil for NULL.
func (b *testBundle) traceparent(t *testing.T, key string) *string {
	t.Helper()
	var tp *string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT traceparent FROM "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+" WHERE key = $1", key).Scan(&tp))
	return tp
}

// row is an intent to enqueue under key, with traceparent tp ("" for none).
func row(key, tp string) *intentdb.EnqueueRow {
	e := &intentdb.EnqueueRow{Args: []byte(`{}`), Effect: "noop", Key: key, KeySource: "explicit", Namespace: "default"}
	if tp != "" {
		e.Traceparent = &tp
	}
	return e
}

// ptr returns a pointer to s, for comparing with a nullable column.
func ptr(s string) *string { return &s }

// traceparentOf is a well-formed W3C traceparent, distinct for each n.
func traceparentOf(n int) string {
	return fmt.Sprintf("00-%032x-%016x-01", n, n)
}

func TestEnqueueTraceparent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("EnqueueKeepsTheFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.queries.Enqueue(ctx, b.pool, row("k1", traceparentOf(1)))
		require.NoError(t, err)
		res, err := b.queries.Enqueue(ctx, b.pool, row("k1", traceparentOf(2)))
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, ptr(traceparentOf(1)), b.traceparent(t, "k1"))

		_, err = b.queries.Enqueue(ctx, b.pool, row("k2", ""))
		require.NoError(t, err)
		require.Nil(t, b.traceparent(t, "k2"))
	})

	// Outside a transaction EnqueueMany is the SQL function, which takes
	// no traceparent: the statement after it records them, on the rows it
	// inserted only.
	t.Run("EnqueueManyFunction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.queries.Enqueue(ctx, b.pool, row("old", traceparentOf(1)))
		require.NoError(t, err)
		by := "cli:someone"
		withBy := row("by", traceparentOf(5))
		withBy.EnqueuedBy = &by
		results, err := b.queries.EnqueueMany(ctx, b.pool, []*intentdb.EnqueueRow{
			row("old", traceparentOf(2)), row("new", traceparentOf(3)), row("new", traceparentOf(4)), row("none", ""), withBy,
		})
		require.NoError(t, err)
		require.Len(t, results, 5)
		require.True(t, results[0].Duplicate)
		require.False(t, results[1].Duplicate)
		require.True(t, results[2].Duplicate)
		require.Equal(t, ptr(traceparentOf(1)), b.traceparent(t, "old"))
		require.Equal(t, ptr(traceparentOf(3)), b.traceparent(t, "new"))
		require.Nil(t, b.traceparent(t, "none"))
		require.Equal(t, ptr(traceparentOf(5)), b.traceparent(t, "by"))
		require.Equal(t, by, *results[4].Row.EnqueuedBy)
	})

	// In a transaction: the plain INSERT when every key is new, the one
	// with ON CONFLICT when one was recorded before.
	t.Run("EnqueueManyTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		many := func(es ...*intentdb.EnqueueRow) []*intentdb.EnqueueResult {
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck
			results, err := b.queries.EnqueueMany(ctx, tx, es)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			return results
		}
		many(row("a", traceparentOf(1)), row("b", ""), row("a", traceparentOf(2)))
		require.Equal(t, ptr(traceparentOf(1)), b.traceparent(t, "a"))
		require.Nil(t, b.traceparent(t, "b"))

		results := many(row("a", traceparentOf(3)), row("c", traceparentOf(4)))
		require.True(t, results[0].Duplicate)
		require.Equal(t, ptr(traceparentOf(1)), b.traceparent(t, "a"))
		require.Equal(t, ptr(traceparentOf(4)), b.traceparent(t, "c"))
	})

	// EnqueueGroup: one intent is the single statement, several the batch
	// one.
	t.Run("EnqueueGroup", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.queries.EnqueueGroup(ctx, b.pool, []*intentdb.EnqueueRow{row("one", traceparentOf(1))}, 0)
		require.NoError(t, err)
		_, err = b.queries.EnqueueGroup(ctx, b.pool, []*intentdb.EnqueueRow{row("one", traceparentOf(2)), row("two", traceparentOf(3))}, time.Second)
		require.NoError(t, err)
		require.Equal(t, ptr(traceparentOf(1)), b.traceparent(t, "one"))
		require.Equal(t, ptr(traceparentOf(3)), b.traceparent(t, "two"))
	})
}

func TestAttemptTraceparent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	var ids []int64
	for i, tp := range []string{traceparentOf(1), ""} {
		res, err := b.queries.Enqueue(ctx, b.pool, row(fmt.Sprintf("k%d", i), tp))
		require.NoError(t, err)
		ids = append(ids, res.Row.ID)
	}
	// The batch's read names the intents' job (an UPDATE, not
	// testfactory.Intent: the intents enqueued with their traceparent).
	_, err := b.pool.Exec(ctx, "UPDATE "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+" SET job_id = 7 WHERE id = ANY($1)", ids)
	require.NoError(t, err)

	read, err := b.queries.Read(ctx, b.pool, ids)
	require.NoError(t, err)
	require.Equal(t, traceparentOf(1), read[ids[0]].Traceparent)
	require.Empty(t, read[ids[1]].Traceparent)

	owned, err := b.queries.BatchOwned(ctx, b.pool, ids, 7)
	require.NoError(t, err)
	require.Len(t, owned, 2)
	require.Equal(t, traceparentOf(1), owned[0].Traceparent)
	require.Empty(t, owned[1].Traceparent)

	claimed, err := b.queries.Claim(ctx, b.pool, ids, time.Minute, []string{"", ""})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.Equal(t, traceparentOf(1), claimed[ids[0]].Traceparent)
	require.Empty(t, claimed[ids[1]].Traceparent)
	// The scan order holds for the columns around it.
	require.Equal(t, "pending", claimed[ids[0]].State)
	require.Equal(t, 1, claimed[ids[0]].Attempt)
}

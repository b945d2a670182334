package intentdb_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/testdb"
)

// The drain's read of the dispatch queue starts from the queue on a fresh
// schema (no statistics) with many intents: its plan never scans the
// intent table, which cost milliseconds a call for an empty answer.
func TestDrainQueuePlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testdb.MigratedSchema(t)
	table := pgx.Identifier{schema, "outbox_intent"}.Sanitize()
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (namespace, key, effect, args, state, completed_at)
		SELECT 'default', 'plan-' || g, 'noop', '{}', 'succeeded', now() FROM generate_series(1, 20000) g`)
	require.NoError(t, err)

	q := intentdb.New(schema)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, "EXPLAIN "+q.SQLDrainQueue(), 100, []string{"noop"})
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.NotContains(t, plan, "Seq Scan on outbox_intent", plan)
	require.Contains(t, plan, "outbox_dispatch_queue_pkey", "the queue drives, in its key's order:\n%s", plan)

	// And it still reads what it should: a queued intent of an effect
	// served, not one of another effect.
	_, err = tx.Exec(ctx, `INSERT INTO `+table+` (namespace, key, effect, args) VALUES ('default', 'queued-noop', 'noop', '{}'), ('default', 'queued-other', 'other', '{}')`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "outbox_dispatch_queue"}.Sanitize()+` (id)
		SELECT id FROM `+table+` WHERE key IN ('queued-noop', 'queued-other') ON CONFLICT DO NOTHING`)
	require.NoError(t, err)
	rows, err = tx.Query(ctx, q.SQLDrainQueue(), 100, []string{"noop"})
	require.NoError(t, err)
	var effectsRead []string
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		effectsRead = append(effectsRead, vals[2].(string))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"noop"}, effectsRead)
}

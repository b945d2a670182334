package intentdb_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
)

func TestMarkRestored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	intents := pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()
	_, err := b.queries.Enqueue(ctx, b.pool, row("pending", ""))
	require.NoError(t, err)
	testfactory.Intent(ctx, t, b.pool, &testfactory.IntentOpts{Key: "running", Schema: b.schema, State: outbox.StateRunning})
	testfactory.Intent(ctx, t, b.pool, &testfactory.IntentOpts{
		CompletedAt: testfactory.Ptr(time.Now()), Key: "succeeded", Schema: b.schema, State: outbox.StateSucceeded,
	})
	var lastChange time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT max(updated_at) FROM `+intents).Scan(&lastChange))
	mark := func(point time.Time) (*intentdb.RestoredResult, error) {
		return dbutil.WithTxV(ctx, b.pool, func(tx pgx.Tx) (*intentdb.RestoredResult, error) {
			return b.queries.MarkRestored(ctx, tx, point)
		})
	}

	// A point before the last change: not a restore to that point.
	_, err = mark(lastChange.Add(-time.Second))
	var pointErr *intentdb.RestorePointError
	require.ErrorAs(t, err, &pointErr)

	res, err := mark(lastChange)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pending": 1, "running": 1}, res.Marked)
	require.Equal(t, int64(1), res.Epoch)
	require.Equal(t, int64(1)<<intentdb.IDEpochBits, res.NextID)
	rows, err := b.pool.Query(ctx, `SELECT key FROM `+intents+` WHERE maybe_sent ORDER BY key`)
	require.NoError(t, err)
	maybeSent, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"pending", "running"}, maybeSent)
	fresh, err := b.queries.Enqueue(ctx, b.pool, row("after", ""))
	require.NoError(t, err)
	require.Equal(t, res.NextID, fresh.Row.ID, "the first intent after recover starts the new epoch")

	// Again: nothing more to mark, one epoch on.
	res, err = mark(time.Now())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pending": 1}, res.Marked, "only the intent enqueued since")
	require.Equal(t, int64(2), res.Epoch)

	// Refused while a process holds its liveness lock.
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	ok, err := b.queries.RegisterProcess(ctx, conn, "client-1", "host", os.Getpid())
	require.NoError(t, err)
	require.True(t, ok)
	_, err = mark(time.Now())
	require.ErrorIs(t, err, intentdb.ErrLiveProcesses)
}

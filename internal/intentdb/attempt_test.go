package intentdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A claim says when the attempt before it ended, for a look-up's settle:
// the finish of one that ended, the lease's end of one whose outcome was
// lost, never the intent's creation.
func TestClaimSinceLastEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	table := pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()

	res, err := b.queries.Enqueue(ctx, b.pool, row("ended", ""))
	require.NoError(t, err)
	ended := res.Row.ID
	res, err = b.queries.Enqueue(ctx, b.pool, row("lost", ""))
	require.NoError(t, err)
	lost := res.Row.ID
	// Created an hour ago; the first ended (pending again, maybe sent) 10 s
	// ago; the second's lease ran out 20 s ago after a claim a minute ago.
	_, err = b.pool.Exec(ctx, `UPDATE `+table+` SET created_at = now() - interval '1 hour', maybe_sent = true, updated_at = now() - interval '10 seconds' WHERE id = $1`, ended)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE `+table+` SET created_at = now() - interval '1 hour', state = 'running', attempt = 1,
		updated_at = now() - interval '1 minute', lease_expires_at = now() - interval '20 seconds' WHERE id = $1`, lost)
	require.NoError(t, err)

	claimed, err := b.queries.Claim(ctx, b.pool, []int64{ended, lost}, time.Minute, []string{"", ""})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.InDelta(t, 10, claimed[ended].SinceLastEnd.Seconds(), 2)
	require.InDelta(t, 20, claimed[lost].SinceLastEnd.Seconds(), 2)
	require.Greater(t, claimed[ended].Age, 59*time.Minute, "the age is still the intent's")
}

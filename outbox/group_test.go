package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
)

// groups records the groups of b's client: each one's keys and error.
type groups struct {
	mu   sync.Mutex
	seen [][]string
	errs []error
}

func (b *testBundle) recordGroups() *groups {
	g := &groups{}
	outbox.SetGroupHook(b.client, func(keys []string, err error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.seen = append(g.seen, keys)
		g.errs = append(g.errs, err)
	})
	return g
}

// with returns the error of the group that carried exactly keys (in any
// order), and whether there was one.
func (g *groups) with(keys ...string) (error, bool) { //nolint:revive,staticcheck // the error is the finding
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, seen := range g.seen {
		if len(seen) == len(keys) && func() bool {
			for _, k := range keys {
				if !slices.Contains(seen, k) {
					return false
				}
			}
			return true
		}() {
			return g.errs[i], true
		}
	}
	return nil, false
}

func (g *groups) largest() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, seen := range g.seen {
		n = max(n, len(seen))
	}
	return n
}

// slowInserts makes the insert of key "slow" take half a second, and that
// of "stuck" two seconds, and refuses key "refused" (SQLSTATE 23514).
func (b *testBundle) slowInserts(t *testing.T) {
	t.Helper()
	fn := pgx.Identifier{b.schema, "test_slow"}.Sanitize()
	_, err := b.pool.Exec(context.Background(), `CREATE FUNCTION `+fn+`() RETURNS trigger
		LANGUAGE plpgsql AS $$ BEGIN
			CASE NEW.key
				WHEN 'slow' THEN PERFORM pg_sleep(0.5);
				WHEN 'stuck' THEN PERFORM pg_sleep(2);
				WHEN 'refused' THEN RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation', CONSTRAINT = 'test_refused';
				ELSE NULL;
			END CASE;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_slow BEFORE INSERT ON `+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+`
			FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
	require.NoError(t, err)
}

// holdLoop enqueues key "slow" and returns once its statement is running:
// for half a second the client's group loop is busy, and calls made
// meanwhile queue up as the next group.
func (b *testBundle) holdLoop(t *testing.T) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := b.client.Enqueue(context.Background(), &outbox.EnqueueParams{Key: "slow", Effect: "noop", Args: map[string]any{}})
		done <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event = 'PgSleep' AND query LIKE '%' || $1 || '%'`, b.schema).Scan(&n))
		return n > 0
	}, 10*time.Second, 2*time.Millisecond)
	return done
}

func (b *testBundle) recorded(t *testing.T, key string) bool {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+" WHERE key = $1", key).Scan(&n))
	return n > 0
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Calls at the same moment share statements, and each is answered as
	// if it had gone alone: new keys created, a key repeated among them
	// created once and the rest duplicates, a key recorded before a
	// duplicate, a key used for two actions created for one and refused to
	// the other.
	t.Run("ConcurrentCallsAnsweredAsAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old, err := b.enqueue(t, &outbox.EnqueueParams{Key: "old", Effect: "noop", Args: map[string]any{"a": 1}})
		require.NoError(t, err)

		type call struct {
			key  string
			args map[string]any
			res  *outbox.EnqueueResult
			err  error
		}
		var calls []*call
		for i := range 30 {
			calls = append(calls, &call{key: fmt.Sprintf("new-%d", i), args: map[string]any{"n": i}})
		}
		for range 10 {
			calls = append(calls, &call{key: "same", args: map[string]any{"a": 1}}, &call{key: "old", args: map[string]any{"a": 1}})
		}
		for j := range 5 {
			calls = append(calls, &call{key: fmt.Sprintf("clash-%d", j), args: map[string]any{"v": 0}},
				&call{key: fmt.Sprintf("clash-%d", j), args: map[string]any{"v": 1}},
				&call{key: "old", args: map[string]any{"a": 2}})
		}
		g := b.recordGroups()
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, c := range calls {
			wg.Go(func() {
				<-start
				c.res, c.err = b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: c.key, Effect: "noop", Args: c.args})
			})
		}
		close(start)
		wg.Wait()

		created := map[string]int64{}
		for _, c := range calls {
			if c.err == nil && !c.res.Duplicate {
				require.NotContains(t, created, c.key, "%s created twice", c.key)
				created[c.key] = c.res.Intent.ID
			}
		}
		for _, c := range calls {
			switch {
			case c.key == "old" && c.args["a"] == 2: // another action
				var reused *outbox.KeyReusedError
				require.ErrorAs(t, c.err, &reused)
				require.Equal(t, old.Intent.ID, reused.Existing.ID)
			case c.key == "old":
				require.NoError(t, c.err)
				require.True(t, c.res.Duplicate)
				require.Equal(t, old.Intent.ID, c.res.Intent.ID)
			case c.key == "same" || c.key[:4] == "new-":
				require.NoError(t, c.err, c.key)
				require.Equal(t, created[c.key], c.res.Intent.ID, c.key)
				require.Equal(t, c.key, c.res.Intent.Key)
				require.Equal(t, outbox.StatePending, c.res.Intent.State)
			default: // clash-j: one created, the other refused naming it
				if c.err == nil {
					require.False(t, c.res.Duplicate, c.key)
					continue
				}
				var reused *outbox.KeyReusedError
				require.ErrorAs(t, c.err, &reused, c.key)
				require.Equal(t, created[c.key], reused.Existing.ID, c.key)
			}
		}
		require.Len(t, created, 30+1+5)
		require.Equal(t, 1+30+1+5, b.count(t, "outbox_intent"))
		require.Greater(t, g.largest(), 1, "no two calls shared a statement")
	})

	// A key held uncommitted by another transaction holds up its own call
	// only: a call at the same moment with another key is answered while
	// that transaction is still open.
	t.Run("OpenTransactionHoldsUpOnlyItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.slowInserts(t) // before the transaction, whose lock it would wait for
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		held, err := b.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "held", Effect: "noop", Args: map[string]any{"a": 1}})
		require.NoError(t, err)

		type answer struct {
			res *outbox.EnqueueResult
			err error
		}
		// Both calls are made while the loop is busy, so that they share
		// the next group.
		g := b.recordGroups()
		slow := b.holdLoop(t)
		heldDone := make(chan answer, 1)
		go func() {
			res, err := b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "held", Effect: "noop", Args: map[string]any{"a": 1}})
			heldDone <- answer{res, err}
		}()
		freeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		free, err := b.client.Enqueue(freeCtx, &outbox.EnqueueParams{Key: "free", Effect: "noop", Args: map[string]any{"a": 1}})
		require.NoError(t, err, "a call with another key waits for the open transaction")
		require.False(t, free.Duplicate)
		require.NoError(t, <-slow)
		groupErr, ok := g.with("held", "free")
		require.True(t, ok, "held and free did not share a group: %v", g.seen)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, groupErr, &pgErr)
		require.Equal(t, "55P03", pgErr.Code, "the group gave up waiting for the held key")
		select {
		case a := <-heldDone:
			t.Fatalf("the held key's call was answered before its transaction ended: %+v", a)
		default:
		}

		require.NoError(t, tx.Commit(ctx))
		a := <-heldDone
		require.NoError(t, a.err)
		require.True(t, a.res.Duplicate)
		require.Equal(t, held.Intent.ID, a.res.Intent.ID)
	})

	// A call whose context ended before its statement was sent writes
	// nothing.
	t.Run("CancelledCallWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := b.client.Enqueue(cancelled, &outbox.EnqueueParams{Key: "gone", Effect: "noop", Args: map[string]any{}})
		require.ErrorIs(t, err, context.Canceled)
		// Calls go in order: once a later one is answered, the cancelled
		// one's turn has passed.
		_, err = b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "later", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		require.False(t, b.recorded(t, "gone"))
		require.True(t, b.recorded(t, "later"))
	})

	// A row the database refuses fails its own call only: its group goes
	// call by call.
	t.Run("RefusedRowFailsOnlyItsCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.slowInserts(t)
		g := b.recordGroups()
		slow := b.holdLoop(t)

		keys := []string{"ok-1", "ok-2", "refused", "ok-3", "ok-4"}
		errs := make([]error, len(keys))
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for i, key := range keys {
			wg.Go(func() {
				_, errs[i] = b.client.Enqueue(callCtx, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: map[string]any{}})
			})
		}
		wg.Wait()
		require.NoError(t, <-slow)
		groupErr, ok := g.with(keys...)
		require.True(t, ok, "the calls did not share a group: %v", g.seen)
		require.Error(t, groupErr)
		for i, key := range keys {
			if key == "refused" {
				var oe *outbox.Error
				require.ErrorAs(t, errs[i], &oe)
				require.Equal(t, outbox.CodeInvalidArgs, oe.Code)
				require.False(t, b.recorded(t, key))
				continue
			}
			require.NoError(t, errs[i], key)
			require.True(t, b.recorded(t, key), key)
		}
	})

	// A group whose every caller gave up is cancelled: it does not hold
	// the calls after it until its statement ends (two seconds here).
	t.Run("AbandonedGroupFreesTheLoop", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.slowInserts(t)
		stuckCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := b.client.Enqueue(stuckCtx, &outbox.EnqueueParams{Key: "stuck", Effect: "noop", Args: map[string]any{}})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		laterCtx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		_, err = b.client.Enqueue(laterCtx, &outbox.EnqueueParams{Key: "later", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err, "the abandoned group held the loop")
	})

	t.Run("InvalidParamsWriteNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "k", Effect: "no such effect", Args: map[string]any{}})
		require.ErrorIs(t, err, outbox.ErrUnknownEffect)
		require.Zero(t, b.count(t, "outbox_intent"))
	})
}

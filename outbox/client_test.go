package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
)

type testBundle struct {
	client *outbox.Client
	pool   *pgxpool.Pool
	schema string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	env := testdb.NewEnv(t, nil)
	return &testBundle{client: env.Client, pool: env.Pool, schema: env.Schema}
}

func (b *testBundle) enqueue(t *testing.T, params *outbox.EnqueueParams) (*outbox.EnqueueResult, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	res, err := b.client.EnqueueTx(ctx, tx, params)
	require.NoError(t, tx.Commit(ctx))
	return res, err
}

func (b *testBundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+pgx.Identifier{b.schema, table}.Sanitize()).Scan(&n))
	return n
}

func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NewThenDuplicate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k1", Effect: "noop", Args: map[string]any{"a": 1}, RequestedBy: "agent-7"})
		require.NoError(t, err)
		require.False(t, first.Duplicate)
		require.Equal(t, outbox.StatePending, first.Intent.State)
		require.Equal(t, outbox.NamespaceDefault, first.Intent.Namespace)
		require.Equal(t, outbox.KeySourceExplicit, first.Intent.KeySource)
		require.Equal(t, "agent-7", *first.Intent.RequestedBy)
		require.Equal(t, outbox.ProviderKey("default", "k1", first.Intent.ID), first.Intent.ProviderKey)
		require.LessOrEqual(t, len(first.Intent.ProviderKey), 64)
		require.NotContains(t, first.Intent.ProviderKey, "k1")

		second, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k1", Effect: "noop", Args: json.RawMessage(`{ "a" : 1.0 }`)})
		require.NoError(t, err)
		require.True(t, second.Duplicate)
		require.Equal(t, first.Intent.ID, second.Intent.ID)
		require.Equal(t, 1, b.count(t, "outbox_intent"))
	})

	t.Run("SameActionVectors", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Each pair is the same action by jsonb equality.
		pairs := []struct{ name, a, b string }{
			{"KeyOrder", `{"a":1,"b":2}`, `{"b":2,"a":1}`},
			{"WhiteSpace", `{"a":[1,2]}`, "{ \"a\" :\n [ 1 , 2 ] }"},
			{"Nesting", `{"o":{"x":{"y":[{"z":1},{"w":"v"}]}}}`, `{"o":{"x":{"y":[{"z":1},{"w":"v"}]}}}`},
			{"NestedKeyOrder", `{"o":{"x":1,"y":2}}`, `{"o":{"y":2,"x":1}}`},
			{"UnicodeEscape", `{"s":"é"}`, `{"s":"\u00e9"}`},
			{"EscapedSlash", `{"s":"a/b"}`, `{"s":"a\/b"}`},
			{"IntegerVsDecimal", `{"n":1}`, `{"n":1.0}`},
			{"IntegerVsExponent", `{"n":1}`, `{"n":1e0}`},
			{"DecimalVsExponent", `{"n":1.50}`, `{"n":15e-1}`},
			{"DuplicateKeysLastWins", `{"a":1,"a":2}`, `{"a":2}`},
		}
		for i, p := range pairs {
			key := fmt.Sprintf("same-%d", i)
			first, err := b.enqueue(t, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: json.RawMessage(p.a)})
			require.NoError(t, err, p.name)
			second, err := b.enqueue(t, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: json.RawMessage(p.b)})
			require.NoError(t, err, p.name)
			require.True(t, second.Duplicate, p.name)
			require.Equal(t, first.Intent.ID, second.Intent.ID, p.name)
		}

		// Each pair is another action.
		others := []struct{ name, a, b string }{
			{"OtherValue", `{"n":1}`, `{"n":2}`},
			{"NumberVsString", `{"n":1}`, `{"n":"1"}`},
			{"ArrayOrder", `{"a":[1,2]}`, `{"a":[2,1]}`},
			{"ExtraField", `{"a":1}`, `{"a":1,"b":null}`},
			{"Case", `{"s":"A"}`, `{"s":"a"}`},
			{"NestedValue", `{"o":{"x":1}}`, `{"o":{"x":1.1}}`},
		}
		for i, p := range others {
			key := fmt.Sprintf("other-%d", i)
			_, err := b.enqueue(t, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: json.RawMessage(p.a)})
			require.NoError(t, err, p.name)
			_, err = b.enqueue(t, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: json.RawMessage(p.b)})
			require.ErrorIs(t, err, outbox.ErrKeyReused, p.name)
		}
	})

	t.Run("KeyReusedLeavesTxUsableAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{"a": 1}})
		require.NoError(t, err)

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = b.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{"a": 2}})
		require.ErrorIs(t, err, outbox.ErrKeyReused)
		var reused *outbox.KeyReusedError
		require.ErrorAs(t, err, &reused)
		require.Equal(t, first.Intent.ID, reused.Existing.ID)
		require.Equal(t, outbox.CodeIdempotencyKeyReused, outbox.ErrorCode(err))
		// The caller's transaction is still usable.
		_, err = b.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "k2", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		got, err := b.client.Get(ctx, "", "k")
		require.NoError(t, err)
		require.JSONEq(t, `{"a":1}`, string(got.Args))
		require.Equal(t, first.Intent.UpdatedAt, got.UpdatedAt)
		require.Equal(t, 2, b.count(t, "outbox_intent"))
	})

	t.Run("AnotherEffectSameArgsIsAnotherAction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Without a registry any well-formed effect name is accepted.
		client, err := outbox.NewClient(b.pool, &outbox.Config{Schema: b.schema})
		require.NoError(t, err)
		_, err = client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{"a": 1}})
		require.NoError(t, err)
		_, err = client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "k", Effect: "email", Args: map[string]any{"a": 1}})
		require.ErrorIs(t, err, outbox.ErrKeyReused)
	})

	t.Run("RolledBackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = b.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, 0, b.count(t, "outbox_intent"))
		require.Equal(t, 0, b.count(t, "river_job"))
		_, err = b.client.Get(ctx, "", "k")
		require.ErrorIs(t, err, outbox.ErrNotFound)
	})

	t.Run("WritesOnlyTheIntentRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		require.Equal(t, 1, b.count(t, "outbox_intent"))
		require.Equal(t, 0, b.count(t, "river_job"))
	})

	t.Run("Namespaces", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, err := b.enqueue(t, &outbox.EnqueueParams{Namespace: "a", Key: "k", Effect: "noop", Args: map[string]any{"x": 1}})
		require.NoError(t, err)
		c, err := b.enqueue(t, &outbox.EnqueueParams{Namespace: "c", Key: "k", Effect: "noop", Args: map[string]any{"x": 2}})
		require.NoError(t, err)
		require.False(t, c.Duplicate)
		require.NotEqual(t, a.Intent.ID, c.Intent.ID)
		require.NotEqual(t, a.Intent.ProviderKey, c.Intent.ProviderKey)

		got, err := b.client.Get(ctx, "a", "k")
		require.NoError(t, err)
		require.Equal(t, a.Intent.ID, got.ID)
		_, err = b.client.Get(ctx, "other", "k")
		require.ErrorIs(t, err, outbox.ErrNotFound)
		list, err := b.client.List(ctx, &outbox.ListParams{Namespace: "c"})
		require.NoError(t, err)
		require.Len(t, list.Intents, 1)
		require.Equal(t, c.Intent.ID, list.Intents[0].ID)
		_, err = b.client.Cancel(ctx, &outbox.CancelParams{Namespace: "other", Key: "k"})
		require.ErrorIs(t, err, outbox.ErrNotFound)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		long := make([]byte, 256)
		for i := range long {
			long[i] = 'a'
		}
		cases := []struct {
			name   string
			params *outbox.EnqueueParams
			is     error
			field  string
		}{
			{"EmptyKey", &outbox.EnqueueParams{Key: "", Effect: "noop", Args: map[string]any{}}, outbox.ErrInvalidKey, "key"},
			{"SpaceInKey", &outbox.EnqueueParams{Key: "a b", Effect: "noop", Args: map[string]any{}}, outbox.ErrInvalidKey, "key"},
			{"NonASCIIKey", &outbox.EnqueueParams{Key: "clé", Effect: "noop", Args: map[string]any{}}, outbox.ErrInvalidKey, "key"},
			{"ControlKey", &outbox.EnqueueParams{Key: "a\x00", Effect: "noop", Args: map[string]any{}}, outbox.ErrInvalidKey, "key"},
			{"LongKey", &outbox.EnqueueParams{Key: string(long), Effect: "noop", Args: map[string]any{}}, outbox.ErrInvalidKey, "key"},
			{"BadNamespace", &outbox.EnqueueParams{Namespace: "a b", Key: "k", Effect: "noop", Args: map[string]any{}}, outbox.ErrInvalidKey, "namespace"},
			{"UnknownEffect", &outbox.EnqueueParams{Key: "k", Effect: "charge", Args: map[string]any{}}, outbox.ErrUnknownEffect, "effect"},
			{"NilArgs", &outbox.EnqueueParams{Key: "k", Effect: "noop"}, outbox.ErrInvalidArgs, "args"},
			{"ArrayArgs", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: json.RawMessage(`[1]`)}, outbox.ErrInvalidArgs, "args"},
			{"BrokenJSON", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: json.RawMessage(`{"a":`)}, outbox.ErrInvalidArgs, "args"},
			{"NulEscape", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: json.RawMessage(`{"a":"\u0000"}`)}, outbox.ErrInvalidArgs, "args"},
			{"EffectValidation", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: json.RawMessage(`{"_noop":{"fail":"sometimes"}}`)}, outbox.ErrInvalidArgs, "args._noop.fail"},
			{"LoneSurrogate", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: json.RawMessage(`{"a":"\ud800"}`)}, outbox.ErrInvalidArgs, "args"},
			{"NumberOutOfRange", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: json.RawMessage(`{"n":1e1000000}`)}, outbox.ErrInvalidArgs, "args"},
			{"NegativeExponentOutOfRange", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: json.RawMessage(`{"n":1E-1000000}`)}, outbox.ErrInvalidArgs, "args"},
			{"DeepNesting", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: json.RawMessage(`{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`)}, outbox.ErrInvalidArgs, "args"},
			{"NulInRequestedBy", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}, RequestedBy: "agent\x00"}, outbox.ErrInvalidArgs, "requested_by"},
			{"BadUTF8InRequestedBy", &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}, RequestedBy: "agent\xff"}, outbox.ErrInvalidArgs, "requested_by"},
		}
		for _, tc := range cases {
			_, err := b.enqueue(t, tc.params)
			require.ErrorIs(t, err, tc.is, tc.name)
			var oe *outbox.Error
			require.ErrorAs(t, err, &oe, tc.name)
			require.Equal(t, tc.field, oe.Field, tc.name)
		}
		require.Equal(t, 0, b.count(t, "outbox_intent"))
	})

	t.Run("BadRequestedByLeavesTxUsable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
		_, err = b.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}, RequestedBy: "a\x00b"})
		require.ErrorIs(t, err, outbox.ErrInvalidArgs)
		_, err = b.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}, RequestedBy: "ab"})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, b.count(t, "outbox_intent"))
	})
}

// 100 concurrent enqueues of one key from many connections: one intent, and
// every caller gets its id.
func TestEnqueueTxConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	// Connections of their own, not the shared pool, so the callers really
	// are separate sessions.
	pool, err := pgxpool.New(ctx, testdb.URL(t))
	require.NoError(t, err)
	pool.Config().MaxConns = 20
	defer pool.Close()

	const callers = 100
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ids   = map[int64]int{}
		dups  int
		start = make(chan struct{})
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tx, err := pool.Begin(ctx)
			if !assertNoError(t, err) {
				return
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			res, err := b.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "same", Effect: "noop", Args: map[string]any{"n": 1}})
			if !assertNoError(t, err) {
				return
			}
			// Hold the transaction open a moment so that others pile up on
			// the unique index behind it.
			time.Sleep(time.Millisecond)
			if !assertNoError(t, tx.Commit(ctx)) {
				return
			}
			mu.Lock()
			ids[res.Intent.ID]++
			if res.Duplicate {
				dups++
			}
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	require.Len(t, ids, 1)
	for _, n := range ids {
		require.Equal(t, callers, n)
	}
	require.Equal(t, callers-1, dups)
	require.Equal(t, 1, b.count(t, "outbox_intent"))
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

func TestEnqueueManyTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// In a transaction, the batch is one set-based statement; on a pool,
	// the SQL function's. Both answer alike.
	for _, inTx := range []bool{false, true} {
		t.Run(fmt.Sprintf("NewAndDuplicates/InTx=%t", inTx), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			_, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k1", Effect: "noop", Args: map[string]any{"i": 1}})
			require.NoError(t, err)
			params := make([]*outbox.EnqueueParams, 0, 100)
			for i := range 100 {
				params = append(params, &outbox.EnqueueParams{Key: fmt.Sprintf("k%d", i), Effect: "noop", Args: map[string]any{"i": i}})
			}
			// The same key twice within one batch is one intent.
			params = append(params, &outbox.EnqueueParams{Key: "k5", Effect: "noop", Args: map[string]any{"i": 5}})
			var res []*outbox.EnqueueResult
			if inTx {
				tx, err := b.pool.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx) //nolint:errcheck
				res, err = b.client.EnqueueManyTx(ctx, tx, params)
				require.NoError(t, err)
				require.NoError(t, tx.Commit(ctx))
			} else {
				res, err = b.client.EnqueueManyTx(ctx, b.pool, params)
				require.NoError(t, err)
			}
			require.Len(t, res, 101)
			for i, r := range res {
				require.Equal(t, params[i].Key, r.Intent.Key)
			}
			require.True(t, res[1].Duplicate)
			require.False(t, res[0].Duplicate)
			require.False(t, res[5].Duplicate)
			require.True(t, res[100].Duplicate)
			require.Equal(t, res[5].Intent.ID, res[100].Intent.ID)
			require.Equal(t, 100, b.count(t, "outbox_intent"))
		})
	}

	// A batch of new keys in a transaction takes the statement that reads
	// back only what the insert does not know: its answers must be the
	// intents as stored, column for column.
	t.Run("AllNewAnswersAsStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.client.SetApprovalRules(ctx, []outbox.ApprovalRule{{Effect: "noop", Arg: "amount", Op: ">=", Value: "100"}}))
		params := []*outbox.EnqueueParams{
			{Key: "n1", Effect: "noop", Args: map[string]any{"b": 2, "a": 1.50}},
			{Key: "n2", Namespace: "other", Effect: "noop", Args: map[string]any{}, RequestedBy: "agent-7"},
			{Key: "n3", Effect: "noop", Args: map[string]any{"amount": 500}},
			{Key: "n4", Effect: "noop", Args: map[string]any{}, RequireApproval: true},
			{Key: "n1", Effect: "noop", Args: map[string]any{"a": 1.5, "b": 2}, RequestedBy: "someone else"},
		}
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		res, err := b.client.EnqueueManyTx(ctx, tx, params)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		require.Len(t, res, len(params))
		require.Equal(t, []bool{false, false, false, false, true}, []bool{res[0].Duplicate, res[1].Duplicate, res[2].Duplicate, res[3].Duplicate, res[4].Duplicate})
		require.Equal(t, outbox.StateAwaitingApproval, res[2].Intent.State)
		require.Equal(t, outbox.StateAwaitingApproval, res[3].Intent.State)
		for i, r := range res {
			ns := params[i].Namespace
			if ns == "" {
				ns = outbox.NamespaceDefault
			}
			stored, err := b.client.Get(ctx, ns, params[i].Key)
			require.NoError(t, err)
			require.Equal(t, stored, r.Intent, "intent %d", i)
		}
		require.Nil(t, res[4].Intent.RequestedBy, "a duplicate answers with the intent first recorded")
	})

	// A key repeated within one batch for another action is a conflict:
	// nothing of the batch is written, and the transaction goes on.
	t.Run("ConflictWithinTheBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = b.client.EnqueueManyTx(ctx, tx, []*outbox.EnqueueParams{
			{Key: "a", Effect: "noop", Args: map[string]any{"i": 1}},
			{Key: "b", Effect: "noop", Args: map[string]any{}},
			{Key: "a", Effect: "noop", Args: map[string]any{"i": 2}},
		})
		require.ErrorIs(t, err, outbox.ErrKeyReused)
		res, err := b.client.EnqueueManyTx(ctx, tx, []*outbox.EnqueueParams{{Key: "c", Effect: "noop", Args: map[string]any{}}})
		require.NoError(t, err)
		require.False(t, res[0].Duplicate)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, b.count(t, "outbox_intent"))
	})

	t.Run("ConflictKeepsNothingOfTheBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.enqueue(t, &outbox.EnqueueParams{Key: "taken", Effect: "noop", Args: map[string]any{"i": 1}})
		require.NoError(t, err)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = b.client.EnqueueManyTx(ctx, tx, []*outbox.EnqueueParams{
			{Key: "new1", Effect: "noop", Args: map[string]any{}},
			{Key: "taken", Effect: "noop", Args: map[string]any{"i": 2}},
			{Key: "new2", Effect: "noop", Args: map[string]any{}},
		})
		var reused *outbox.KeyReusedError
		require.ErrorAs(t, err, &reused)
		require.Equal(t, "taken", reused.Existing.Key)
		// The transaction is usable and holds nothing of the batch.
		var n int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()).Scan(&n))
		require.Equal(t, 1, n)
		require.NoError(t, tx.Commit(ctx))
	})

	t.Run("BadItemNamesItsIndex", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.EnqueueManyTx(ctx, b.pool, []*outbox.EnqueueParams{
			{Key: "ok", Effect: "noop", Args: map[string]any{}},
			{Key: "bad key", Effect: "noop", Args: map[string]any{}},
		})
		var oe *outbox.Error
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "[1].key", oe.Field)
		require.Equal(t, 0, b.count(t, "outbox_intent"))
	})
}

// outbox.enqueue from a plain SQL session, and one action sent through SQL and
// the Go library.
func TestSQLEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	fn := pgx.Identifier{b.schema, "enqueue"}.Sanitize()

	// A service in another language: its own transaction, plain SQL, text
	// arguments only.
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	var (
		id        int64
		state     string
		duplicate bool
	)
	require.NoError(t, tx.QueryRow(ctx, `SELECT (intent).id, (intent).state, duplicate FROM `+fn+`('default', 'sql-1', 'noop', '{"b": 2, "a": 1}', 'billing-svc')`).Scan(&id, &state, &duplicate))
	require.False(t, duplicate)
	require.Equal(t, "pending", state)
	require.NoError(t, tx.Commit(ctx))

	// The same action through the Go library is a duplicate of it.
	res, err := b.enqueue(t, &outbox.EnqueueParams{Key: "sql-1", Effect: "noop", Args: map[string]any{"a": 1, "b": 2}})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, id, res.Intent.ID)
	require.Equal(t, "billing-svc", *res.Intent.RequestedBy)

	// And the other way around.
	_, err = b.enqueue(t, &outbox.EnqueueParams{Key: "go-1", Effect: "noop", Args: map[string]any{"n": 1}})
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `SELECT duplicate FROM `+fn+`('default', 'go-1', 'noop', '{"n": 1.0}')`).Scan(&duplicate))
	require.True(t, duplicate)

	// A conflict raises with the documented message, and the SQLSTATE OB001.
	_, err = conn.Exec(ctx, `SELECT * FROM `+fn+`('default', 'go-1', 'noop', '{"n": 2}')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "OB001", pgErr.Code)
	require.Regexp(t, `^idempotency_key_reused`, pgErr.Message)

	// The view shows the intents without the dispatcher's bookkeeping.
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{b.schema, "intents_view"}.Sanitize()+` WHERE key IN ('sql-1', 'go-1')`).Scan(&n))
	require.Equal(t, 2, n)

	// The SQL provider key is the Go one.
	var pk string
	require.NoError(t, conn.QueryRow(ctx, `SELECT `+pgx.Identifier{b.schema, "outbox_provider_key"}.Sanitize()+`('ns', 'clé', 42)`).Scan(&pk))
	require.Equal(t, outbox.ProviderKey("ns", "clé", 42), pk)

	// An intent inserted by hand gets its provider key from the table (raw
	// SQL, not testfactory.Intent: the hand-written INSERT is what's tested).
	var byHandID int64
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO `+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+
		` (namespace, key, effect, args) VALUES ('ns', 'by-hand', 'noop', '{}') RETURNING id, provider_key`).Scan(&byHandID, &pk))
	require.Equal(t, outbox.ProviderKey("ns", "by-hand", byHandID), pk)

	// Bad input from SQL is refused by the table's constraints.
	_, err = conn.Exec(ctx, `SELECT * FROM `+fn+`('default', 'has space', 'noop', '{}')`)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code)
}

func TestListGetCancelResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ListPagesNewestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		params := make([]*outbox.EnqueueParams, 25)
		for i := range params {
			params[i] = &outbox.EnqueueParams{Key: fmt.Sprintf("k%02d", i), Effect: "noop", Args: map[string]any{}}
		}
		_, err := b.client.EnqueueManyTx(ctx, b.pool, params)
		require.NoError(t, err)
		_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "k03"})
		require.NoError(t, err)

		var keys []string
		cursor := ""
		pages := 0
		for {
			page, err := b.client.List(ctx, &outbox.ListParams{Limit: 10, Cursor: cursor})
			require.NoError(t, err)
			pages++
			for _, i := range page.Intents {
				keys = append(keys, i.Key)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		require.Equal(t, 3, pages)
		require.Len(t, keys, 25)
		require.Equal(t, "k24", keys[0])
		require.Equal(t, "k00", keys[24])

		cancelled, err := b.client.List(ctx, &outbox.ListParams{States: []outbox.State{outbox.StateCancelled}})
		require.NoError(t, err)
		require.Len(t, cancelled.Intents, 1)
		require.Equal(t, "k03", cancelled.Intents[0].Key)

		_, err = b.client.List(ctx, &outbox.ListParams{Cursor: "garbage"})
		require.ErrorIs(t, err, outbox.ErrInvalidArgs)
		_, err = b.client.List(ctx, &outbox.ListParams{Limit: 1001})
		require.ErrorIs(t, err, outbox.ErrInvalidArgs)
		_, err = b.client.List(ctx, &outbox.ListParams{States: []outbox.State{"nope"}})
		require.ErrorIs(t, err, outbox.ErrInvalidArgs)
	})

	t.Run("GetByID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.client.Enqueue(ctx, &outbox.EnqueueParams{Namespace: "shop", Key: "k", Effect: "noop", Args: map[string]any{"n": 1}})
		require.NoError(t, err)
		got, err := b.client.GetByID(ctx, "shop", res.Intent.ID)
		require.NoError(t, err)
		byKey, err := b.client.Get(ctx, "shop", "k")
		require.NoError(t, err)
		require.Equal(t, byKey, got, "the same intent as Get reads, job kind included")
		// Another namespace's intent, or none, is not found.
		_, err = b.client.GetByID(ctx, "default", res.Intent.ID)
		require.ErrorIs(t, err, outbox.ErrNotFound)
		_, err = b.client.GetByID(ctx, "shop", res.Intent.ID+1000)
		require.ErrorIs(t, err, outbox.ErrNotFound)
		_, err = b.client.GetByID(ctx, "Not A Namespace!", res.Intent.ID)
		require.ErrorIs(t, err, outbox.ErrInvalidKey)
	})

	// The rare states are listed from where only they are (migration 014:
	// the unknown intents' table, kept by a trigger; the intents that
	// awaited approval): an intent is listed while it is in the state, and
	// no longer once it leaves it.
	t.Run("ListRareStates", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, k := range []string{"a", "b"} {
			testfactory.Intent(ctx, t, b.pool, &testfactory.IntentOpts{
				CompletedAt: testfactory.Ptr(time.Now()), Key: k, MaybeSent: testfactory.Ptr(true), Schema: b.schema, State: outbox.StateUnknown,
			})
		}
		_, err := b.enqueue(t, &outbox.EnqueueParams{Key: "c", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		_, err = b.enqueue(t, &outbox.EnqueueParams{Key: "held", Effect: "noop", Args: map[string]any{}, RequireApproval: true})
		require.NoError(t, err)
		table := pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()
		keys := func(state outbox.State) []string {
			list, err := b.client.List(ctx, &outbox.ListParams{States: []outbox.State{state}})
			require.NoError(t, err)
			var out []string
			for _, i := range list.Intents {
				require.Equal(t, state, i.State)
				out = append(out, i.Key)
			}
			return out
		}
		require.Equal(t, []string{"b", "a"}, keys(outbox.StateUnknown))
		require.Equal(t, []string{"held"}, keys(outbox.StateAwaitingApproval))

		_, err = b.client.Resolve(ctx, &outbox.ResolveParams{Key: "a", Outcome: outbox.OutcomeFailed, Note: "checked"})
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, keys(outbox.StateUnknown))
		// An UPDATE, not testfactory.Intent: the intent leaves the state.
		_, err = b.pool.Exec(ctx, "UPDATE "+table+" SET state = 'pending' WHERE key = 'held'")
		require.NoError(t, err)
		require.Empty(t, keys(outbox.StateAwaitingApproval))
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "outbox_intent_unknown"}.Sanitize()).Scan(&n))
		require.Equal(t, 1, n, "the resolved intent left the unknown ones' table")
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		got, err := b.client.Cancel(ctx, &outbox.CancelParams{Key: "k"})
		require.NoError(t, err)
		require.Equal(t, outbox.StateCancelled, got.State)
		require.NotNil(t, got.CompletedAt)
		_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "k"})
		require.ErrorIs(t, err, outbox.ErrNotCancellable)
		_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "missing"})
		require.ErrorIs(t, err, outbox.ErrNotFound)

		// A pending intent whose earlier attempt may have acted is not
		// cancellable: that attempt may have charged the card.
		testfactory.Intent(ctx, t, b.pool, &testfactory.IntentOpts{Key: "maybe", MaybeSent: testfactory.Ptr(true), Schema: b.schema})
		_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "maybe"})
		require.ErrorIs(t, err, outbox.ErrNotCancellable)

		// A pending intent whose River job is running has an attempt in
		// flight (deduplicated effects are not claimed before their call).
		var jobID int64
		require.NoError(t, b.pool.QueryRow(ctx, "INSERT INTO "+pgx.Identifier{b.schema, "river_job"}.Sanitize()+
			` (args, kind, max_attempts, priority, queue, state, attempt, attempted_at, metadata, tags)
			VALUES ('{}', 'outbox_intent', 25, 1, 'noop', 'running', 1, now(), '{}', '{}') RETURNING id`).Scan(&jobID))
		testfactory.Intent(ctx, t, b.pool, &testfactory.IntentOpts{JobID: &jobID, Key: "inflight", Schema: b.schema})
		_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "inflight"})
		require.ErrorIs(t, err, outbox.ErrNotCancellable)
		require.ErrorContains(t, err, "an attempt may have started")
		// Once the job waits for a retry, nothing is in flight, but the
		// attempt that ran recorded nothing (a worker killed mid-call,
		// whose job River rescued): the provider may have acted.
		_, err = b.pool.Exec(ctx, "UPDATE "+pgx.Identifier{b.schema, "river_job"}.Sanitize()+" SET state = 'retryable', scheduled_at = now() + interval '1 hour' WHERE id = $1", jobID)
		require.NoError(t, err)
		_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "inflight"})
		require.ErrorIs(t, err, outbox.ErrNotCancellable)
		// Once that attempt recorded its outcome (not sent), it may go (an
		// UPDATE, not testfactory.Intent: the same intent, a step later).
		_, err = b.pool.Exec(ctx, "UPDATE "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+" SET job_attempt = 1 WHERE key = 'inflight'")
		require.NoError(t, err)
		got, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "inflight"})
		require.NoError(t, err)
		require.Equal(t, outbox.StateCancelled, got.State)
	})

	t.Run("Resolve", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, k := range []string{"s", "f", "r"} {
			_, err := b.enqueue(t, &outbox.EnqueueParams{Key: k, Effect: "noop", Args: map[string]any{}})
			require.NoError(t, err)
		}
		_, err := b.client.Resolve(ctx, &outbox.ResolveParams{Key: "s", Outcome: outbox.OutcomeSucceeded})
		require.ErrorIs(t, err, outbox.ErrNotUnknown)

		// An UPDATE, not testfactory.Intent: the same intents, refused a
		// resolution while pending just above.
		_, err = b.pool.Exec(ctx, "UPDATE "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+
			" SET state = 'unknown', maybe_sent = true, job_id = 1, attempt = 3, completed_at = now()")
		require.NoError(t, err)

		s, err := b.client.Resolve(ctx, &outbox.ResolveParams{Key: "s", Outcome: outbox.OutcomeSucceeded, Note: "seen in the Stripe dashboard"})
		require.NoError(t, err)
		require.Equal(t, outbox.StateSucceeded, s.State)
		require.Contains(t, string(s.Result), "seen in the Stripe dashboard")

		f, err := b.client.Resolve(ctx, &outbox.ResolveParams{Key: "f", Outcome: outbox.OutcomeFailed, Note: "no such charge"})
		require.NoError(t, err)
		require.Equal(t, outbox.StateFailed, f.State)
		require.Equal(t, "resolved_failed", f.Error.Code)

		r, err := b.client.Resolve(ctx, &outbox.ResolveParams{Key: "r", Outcome: outbox.OutcomeRetry})
		require.NoError(t, err)
		require.Equal(t, outbox.StatePending, r.State)
		require.Nil(t, r.JobID)
		require.Nil(t, r.CompletedAt)
		require.Equal(t, 3, r.Attempts, "the attempt number is the fencing token and never goes back")

		_, err = b.client.Resolve(ctx, &outbox.ResolveParams{Key: "r", Outcome: "maybe"})
		require.ErrorIs(t, err, outbox.ErrInvalidArgs)
	})
}

func TestWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)

	t.Run("TimesOutWithTheIntent", func(t *testing.T) {
		waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		got, err := b.client.Wait(waitCtx, "", "k")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, outbox.StatePending, got.State)
	})

	t.Run("WakesOnTerminalChange", func(t *testing.T) {
		type result struct {
			intent *outbox.Intent
			err    error
		}
		done := make(chan result, 1)
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		go func() {
			i, err := b.client.Wait(waitCtx, "", "k")
			done <- result{i, err}
		}()
		// Cancel fires the state-change notification the waiter listens
		// for. It comes once the waiter surely listens, so that it is the
		// notification, not the read that follows LISTEN, that wakes it.
		require.Eventually(t, func() bool { return b.listeners(t) == 1 }, 10*time.Second, 10*time.Millisecond)
		_, err := b.client.Cancel(ctx, &outbox.CancelParams{Key: "k"})
		require.NoError(t, err)
		select {
		case r := <-done:
			require.NoError(t, r.err)
			require.Equal(t, outbox.StateCancelled, r.intent.State)
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not wake on the state change")
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		_, err := b.client.Wait(ctx, "", "missing")
		require.True(t, errors.Is(err, outbox.ErrNotFound))
	})
}

// Watch signals once it is in effect, then on every state change of its
// intents, including those no Wait returns on (running), and not on
// another intent's; it stops listening when its context ends.
func TestWatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	mine, err := b.enqueue(t, &outbox.EnqueueParams{Key: "mine", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	theirs, err := b.enqueue(t, &outbox.EnqueueParams{Key: "theirs", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	watchCtx, cancel := context.WithCancel(ctx)
	wake := b.client.Watch(watchCtx, []int64{mine.Intent.ID})
	requireSignal := func(what string) {
		t.Helper()
		select {
		case <-wake:
		case <-time.After(10 * time.Second):
			t.Fatal("no signal " + what)
		}
	}
	requireQuiet := func(what string) {
		t.Helper()
		select {
		case <-wake:
			t.Fatal("a signal " + what)
		case <-time.After(300 * time.Millisecond):
		}
	}
	requireSignal("once the watch is in effect")
	require.Equal(t, 1, b.listeners(t))
	notify := func(payload string) {
		t.Helper()
		_, err := b.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, b.schema+".intent_changed", payload)
		require.NoError(t, err)
	}
	notify(fmt.Sprintf("running %d", theirs.Intent.ID))
	requireQuiet("for another intent's change")
	notify(fmt.Sprintf("running %d,%d", theirs.Intent.ID, mine.Intent.ID))
	requireSignal("for a running intent")
	_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "mine"})
	require.NoError(t, err)
	requireSignal("for the cancel")
	cancel()
	require.Eventually(t, func() bool { return b.listeners(t) == 0 }, 10*time.Second, 10*time.Millisecond)
}

// A client that cannot listen (its pool behind a transaction pooler) reads
// the intent again every WaitPollInterval, and opens no LISTEN connection.
func TestWaitPollOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	client, err := outbox.NewClient(b.pool, &outbox.Config{PollOnly: true, Schema: b.schema})
	require.NoError(t, err)
	_, err = b.enqueue(t, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	done := make(chan *outbox.Intent, 1)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		i, err := client.Wait(waitCtx, "", "k")
		assert.NoError(t, err)
		done <- i
	}()
	time.Sleep(2 * outbox.WaitPollInterval)
	require.Zero(t, b.listeners(t), "a poll-only client listened")
	cancelled := time.Now()
	_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "k"})
	require.NoError(t, err)
	select {
	case i := <-done:
		require.Equal(t, outbox.StateCancelled, i.State)
		require.Less(t, time.Since(cancelled), 10*outbox.WaitPollInterval)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not see the state change")
	}
}

// The enqueue's fast path cannot see a row committed by a concurrent
// enqueue of the same key while it waited; it must fall back and still
// answer with that intent.
func TestEnqueueTxWaitsForConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	first, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx) //nolint:errcheck
	res1, err := b.client.EnqueueTx(ctx, first, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{"a": 1}})
	require.NoError(t, err)

	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	type result struct {
		res *outbox.EnqueueResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := b.client.EnqueueTx(ctx, conn, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{"a": 1}})
		done <- result{res, err}
	}()
	// The second enqueue is blocked on the first's uncommitted row.
	require.Eventually(t, func() bool {
		var waiting bool
		err := b.pool.QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Commit(ctx))

	r := <-done
	require.NoError(t, r.err)
	require.True(t, r.res.Duplicate)
	require.Equal(t, res1.Intent.ID, r.res.Intent.ID)

	// And when the first rolls back instead, the second one's insert wins.
	first, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = b.client.EnqueueTx(ctx, first, &outbox.EnqueueParams{Key: "k2", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	go func() {
		res, err := b.client.EnqueueTx(ctx, conn, &outbox.EnqueueParams{Key: "k2", Effect: "noop", Args: map[string]any{}})
		done <- result{res, err}
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		err := b.pool.QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Rollback(ctx))
	r = <-done
	require.NoError(t, r.err)
	require.False(t, r.res.Duplicate)
}

// The pre-checks for jsonb's limits refuse only what jsonb would refuse.
func TestEnqueueTxArgsWithinLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, args := range []string{
		`{"s":"e99999999999","t":"\"e1000000"}`,
		`{"n":1.5e3,"m":-2E-10,"big":1e99999}`,
		`{"a":` + strings.Repeat("[", 99) + strings.Repeat("]", 99) + `}`,
	} {
		_, err := b.enqueue(t, &outbox.EnqueueParams{Key: fmt.Sprintf("k%d", i), Effect: "noop", Args: json.RawMessage(args)})
		require.NoError(t, err, args)
	}
}

// Many waits share one LISTEN connection, and each wakes on its own intent.
func TestWaitSharesOneListener(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 40
	for i := range n {
		_, err := b.enqueue(t, &outbox.EnqueueParams{Key: fmt.Sprintf("k%d", i), Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	results := make(chan *outbox.Intent, n)
	for i := range n {
		go func() {
			got, err := b.client.Wait(waitCtx, "", fmt.Sprintf("k%d", i))
			if err != nil {
				t.Errorf("wait: %v", err)
			}
			results <- got
		}()
	}
	listeners := func() int { return b.listeners(t) }
	require.Eventually(t, func() bool { return listeners() == 1 }, 10*time.Second, 10*time.Millisecond)

	for i := range n {
		_, err := b.client.Cancel(ctx, &outbox.CancelParams{Key: fmt.Sprintf("k%d", i)})
		require.NoError(t, err)
	}
	for range n {
		got := <-results
		require.Equal(t, outbox.StateCancelled, got.State)
	}
	// The last waiter to leave closes the listener.
	require.Eventually(t, func() bool { return listeners() == 0 }, 10*time.Second, 10*time.Millisecond)
}

// listeners counts the backends listening to the schema's state changes.
func (b *testBundle) listeners(t *testing.T) int {
	t.Helper()
	return b.scalarQuery(t, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, "LISTEN "+pgx.Identifier{b.schema + ".intent_changed"}.Sanitize())
}

// Wait survives its LISTEN connection being terminated (a failover, an
// operator's pg_terminate_backend): it reconnects, and a change committed
// afterwards still wakes it.
func TestWaitAfterItsListenerIsTerminated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := make(chan *outbox.Intent, 1)
	go func() {
		got, _ := b.client.Wait(waitCtx, "", "k")
		done <- got
	}()
	listen := "LISTEN " + pgx.Identifier{b.schema + ".intent_changed"}.Sanitize()
	require.Eventually(t, func() bool { return b.listeners(t) == 1 }, 10*time.Second, 10*time.Millisecond)
	pid := b.scalarQuery(t, `SELECT pid FROM pg_stat_activity WHERE query = $1`, listen)
	require.Equal(t, 1, b.scalarQuery(t, `SELECT count(*) FROM pg_stat_activity, pg_terminate_backend($1) t WHERE pid = $1`, pid))
	// A new LISTEN connection, on another backend.
	require.Eventually(t, func() bool {
		return b.scalarQuery(t, `SELECT count(*) FROM pg_stat_activity WHERE query = $1 AND pid <> $2`, listen, pid) == 1
	}, 10*time.Second, 10*time.Millisecond)

	_, err = b.client.Cancel(ctx, &outbox.CancelParams{Key: "k"})
	require.NoError(t, err)
	select {
	case got := <-done:
		require.NotNil(t, got)
		require.Equal(t, outbox.StateCancelled, got.State)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not wake after its listener was replaced")
	}
}

func (b *testBundle) scalarQuery(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// EnqueueTx takes a savepoint as it takes a transaction: rolled back with
// the savepoint, kept with it.
func TestEnqueueTxInASavepoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	_, err = b.client.EnqueueTx(ctx, sp, &outbox.EnqueueParams{Key: "dropped", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	require.NoError(t, sp.Rollback(ctx))

	sp, err = tx.Begin(ctx)
	require.NoError(t, err)
	_, err = b.client.EnqueueTx(ctx, sp, &outbox.EnqueueParams{Key: "kept", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	require.NoError(t, sp.Commit(ctx))
	require.NoError(t, tx.Commit(ctx))

	_, err = b.client.Get(ctx, "", "dropped")
	require.ErrorIs(t, err, outbox.ErrNotFound)
	_, err = b.client.Get(ctx, "", "kept")
	require.NoError(t, err)
}

// Under REPEATABLE READ and SERIALIZABLE, an enqueue of a key that another
// transaction recorded after this one's snapshot is a serialization failure
// (SQLSTATE 40001), as docs/design.md says, to be retried like any other;
// the retry is a duplicate. Without the race, both work as usual.
func TestEnqueueTxUnderStricterIsolation(t *testing.T) {
	t.Parallel()
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			params := &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{"a": 1}}

			// Without a race: a new intent, then a duplicate.
			for _, wantDuplicate := range []bool{false, true} {
				tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
				require.NoError(t, err)
				res, err := b.client.EnqueueTx(ctx, tx, params)
				require.NoError(t, err)
				require.Equal(t, wantDuplicate, res.Duplicate)
				require.NoError(t, tx.Commit(ctx))
			}

			// The race: this transaction's snapshot predates another's
			// commit of the same key.
			race := &outbox.EnqueueParams{Key: "raced", Effect: "noop", Args: map[string]any{"a": 1}}
			tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // rolled back on failure
			// The first statement takes the snapshot.
			_, err = tx.Exec(ctx, "SELECT 1")
			require.NoError(t, err)
			_, err = b.client.EnqueueTx(ctx, b.pool, race)
			require.NoError(t, err)
			_, err = b.client.EnqueueTx(ctx, tx, race)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "40001", pgErr.Code)
			require.NoError(t, tx.Rollback(ctx))

			// Retried, it is a duplicate.
			tx, err = b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			require.NoError(t, err)
			res, err := b.client.EnqueueTx(ctx, tx, race)
			require.NoError(t, err)
			require.True(t, res.Duplicate)
			require.NoError(t, tx.Commit(ctx))
		})
	}
}

// A batch in a transaction that waits on another transaction's uncommitted
// key: when that one commits, the batch's set-based statement cannot see
// the row it lost to, and the batch falls back to the function, which
// answers duplicate (or, for another action, conflict with nothing of the
// batch written).
func TestEnqueueManyTxWaitsForConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	for _, tc := range []struct {
		name     string
		args     map[string]any
		conflict bool
	}{{"SameAction", map[string]any{"a": 1}, false}, {"OtherAction", map[string]any{"a": 2}, true}} {
		key := "race-" + tc.name
		first, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		res1, err := b.client.EnqueueTx(ctx, first, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: map[string]any{"a": 1}})
		require.NoError(t, err)

		second, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		var pid int
		require.NoError(t, second.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		type result struct {
			res []*outbox.EnqueueResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := b.client.EnqueueManyTx(ctx, second, []*outbox.EnqueueParams{
				{Key: key + "-other", Effect: "noop", Args: map[string]any{}},
				{Key: key, Effect: "noop", Args: tc.args},
			})
			done <- result{res, err}
		}()
		require.Eventually(t, func() bool {
			var waiting bool
			err := b.pool.QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
			return err == nil && waiting
		}, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, first.Commit(ctx))

		r := <-done
		if tc.conflict {
			require.ErrorIs(t, r.err, outbox.ErrKeyReused, tc.name)
		} else {
			require.NoError(t, r.err, tc.name)
			require.False(t, r.res[0].Duplicate)
			require.True(t, r.res[1].Duplicate)
			require.Equal(t, res1.Intent.ID, r.res[1].Intent.ID)
		}
		require.NoError(t, second.Commit(ctx), "the transaction stays usable")
		n := b.scalarQuery(t, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+" WHERE key = $1", key+"-other")
		if tc.conflict {
			require.Equal(t, 0, n, "a conflict writes nothing of the batch")
		} else {
			require.Equal(t, 1, n)
		}
	}
}

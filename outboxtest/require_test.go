package outboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// mockT records a failure instead of ending the test, so that a test can
// check that an assertion fails, and says why.
type mockT struct {
	tb     testing.TB
	failed bool
	logs   strings.Builder
}

func newMockT(tb testing.TB) *mockT { return &mockT{tb: tb} }

func (m *mockT) FailNow()        { m.failed = true }
func (m *mockT) Helper()         {}
func (m *mockT) Log(args ...any) { fmt.Fprintln(&m.logs, args...) }

// failure is the message of the assertion's failure, without its header.
func (m *mockT) failure() string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(m.logs.String()), "outboxtest assertion failure:"))
}

type testBundle struct {
	client *outbox.Client
	mockT  *mockT
	pool   *pgxpool.Pool
	schema string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testdb.Pool(t)
	schema := MigrateSchema(t.Context(), t, pool)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	return &testBundle{client: client, mockT: newMockT(t), pool: pool, schema: schema}
}

func (b *testBundle) enqueue(t *testing.T, q outbox.Executor, key, effect string, args any) {
	t.Helper()
	_, err := b.client.EnqueueTx(t.Context(), q, &outbox.EnqueueParams{Key: key, Effect: effect, Args: args})
	require.NoError(t, err)
}

func TestRequireEnqueued(t *testing.T) {
	t.Parallel()

	charge := map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"}

	t.Run("ByKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, b.pool, "order-1-charge", "charge", charge)

		intent := requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Key: "order-1-charge"})
		require.False(t, b.mockT.failed, b.mockT.failure())
		require.Equal(t, "charge", intent.Effect)
		require.Equal(t, outbox.StatePending, intent.State)
	})

	t.Run("ByEffectArgsAndState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, b.pool, "order-1-charge", "charge", charge)
		b.enqueue(t, b.pool, "order-2-charge", "charge", map[string]any{"customer": "cus_2", "amount": 500, "currency": "eur"})
		b.enqueue(t, b.pool, "order-1-email", "email", map[string]any{"to": "a@example.com"})

		// Another key order and a struct: the same JSON value.
		args := struct {
			Currency string `json:"currency"`
			Amount   int    `json:"amount"`
			Customer string `json:"customer"`
		}{"eur", 1999, "cus_1"}
		intent := requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{
			Effect: "charge", Args: args, State: outbox.StatePending,
		})
		require.False(t, b.mockT.failed, b.mockT.failure())
		require.Equal(t, "order-1-charge", intent.Key)
	})

	t.Run("InANamespace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.EnqueueTx(t.Context(), b.pool, &outbox.EnqueueParams{Namespace: "tenant_a", Key: "k", Effect: "charge", Args: charge})
		require.NoError(t, err)

		requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Namespace: "tenant_a", Key: "k"})
		require.False(t, b.mockT.failed, b.mockT.failure())

		requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Key: "k"})
		require.True(t, b.mockT.failed)
		require.Equal(t, `No intent matches key "k": none found in namespace "default" with key "k"`, b.mockT.failure())
	})

	t.Run("InATransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // the test's end
		b.enqueue(t, tx, "order-1-charge", "charge", charge)

		requireEnqueued(t.Context(), b.mockT, tx, b.schema, &ExpectedIntent{Key: "order-1-charge", Args: charge})
		require.False(t, b.mockT.failed, b.mockT.failure())

		// Not committed: outside the transaction, there is none.
		requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Key: "order-1-charge"})
		require.True(t, b.mockT.failed)
	})

	t.Run("NoneFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Effect: "charge"})
		require.True(t, b.mockT.failed)
		require.Equal(t, `No intent matches effect "charge": none found in namespace "default" of effect "charge"`, b.mockT.failure())
	})

	t.Run("MismatchListsWhatWasFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, b.pool, "order-1-charge", "charge", charge)

		requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{
			Key: "order-1-charge", Args: map[string]any{"customer": "cus_1", "amount": 2999, "currency": "eur"},
		})
		require.True(t, b.mockT.failed)
		require.Equal(t, `No intent matches key "order-1-charge", args {"amount":2999,"currency":"eur","customer":"cus_1"}; `+
			`found in namespace "default" with key "order-1-charge":`+"\n"+
			`    key "order-1-charge", effect "charge", state pending, args {"amount": 1999, "currency": "eur", "customer": "cus_1"}`,
			b.mockT.failure())
	})

	t.Run("MoreThanOneFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, b.pool, "order-1-charge", "charge", charge)
		b.enqueue(t, b.pool, "order-2-charge", "charge", charge)

		intent := requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Effect: "charge"})
		require.True(t, b.mockT.failed)
		require.Nil(t, intent)
		require.Contains(t, b.mockT.failure(), `2 intents match effect "charge", expected one (give a Key to tell them apart):`)
		require.Contains(t, b.mockT.failure(), `key "order-1-charge"`)
		require.Contains(t, b.mockT.failure(), `key "order-2-charge"`)
	})

	t.Run("BadArgsFail", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		requireEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Args: func() {}})
		require.True(t, b.mockT.failed)
		require.Contains(t, b.mockT.failure(), "Internal failure: error marshalling expected args")
	})

	t.Run("ThePublicFormsPass", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, b.pool, "order-1-charge", "charge", charge)

		RequireEnqueued(t.Context(), t, b.pool, b.schema, &ExpectedIntent{Key: "order-1-charge"})
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // the test's end
		RequireEnqueuedTx(t.Context(), t, tx, b.schema, &ExpectedIntent{Effect: "charge"})
	})
}

func TestRequireManyEnqueued(t *testing.T) {
	t.Parallel()

	charge := map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"}
	email := map[string]any{"to": "a@example.com"}

	// setup enqueues a charge, an email and a charge of another order, in
	// this order.
	setupMany := func(t *testing.T, q func(b *testBundle) outbox.Executor) *testBundle {
		t.Helper()
		b := setup(t)
		b.enqueue(t, q(b), "order-1-charge", "charge", charge)
		b.enqueue(t, q(b), "order-1-email", "email", email)
		b.enqueue(t, q(b), "order-2-charge", "charge", map[string]any{"customer": "cus_2", "amount": 500, "currency": "eur"})
		return b
	}
	pool := func(b *testBundle) outbox.Executor { return b.pool }

	t.Run("InOrder", func(t *testing.T) {
		t.Parallel()
		b := setupMany(t, pool)

		// The other order's charge is not named: it is ignored.
		intents := requireManyEnqueued(t.Context(), b.mockT, b.pool, b.schema, []*ExpectedIntent{
			{Effect: "charge", Args: charge},
			{Key: "order-1-email", Effect: "email"},
		})
		require.False(t, b.mockT.failed, b.mockT.failure())
		require.Len(t, intents, 2)
		require.Equal(t, "order-1-charge", intents[0].Key)
		require.Equal(t, "order-1-email", intents[1].Key)
	})

	t.Run("InATransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // the test's end
		b.enqueue(t, tx, "order-1-charge", "charge", charge)
		b.enqueue(t, tx, "order-1-email", "email", email)

		expected := []*ExpectedIntent{{Key: "order-1-charge"}, {Key: "order-1-email"}}
		intents := RequireManyEnqueuedTx(t.Context(), t, tx, b.schema, expected)
		require.Len(t, intents, 2)

		// Not committed: outside the transaction, there is none.
		requireManyEnqueued(t.Context(), b.mockT, b.pool, b.schema, expected)
		require.True(t, b.mockT.failed)
		require.Equal(t, `Expected intent 1 of 2: No intent matches key "order-1-charge": none found in namespace "default" with key "order-1-charge"`, b.mockT.failure())
	})

	t.Run("OtherOrderFails", func(t *testing.T) {
		t.Parallel()
		b := setupMany(t, pool)

		requireManyEnqueued(t.Context(), b.mockT, b.pool, b.schema, []*ExpectedIntent{
			{Key: "order-1-email"},
			{Key: "order-1-charge"},
		})
		require.True(t, b.mockT.failed)
		require.Equal(t, `Intents enqueued in another order than expected: expected intent 2 (key "order-1-charge") was enqueued before 1 (key "order-1-email"); in the order enqueued:
    key "order-1-charge", effect "charge", state pending, args {"amount": 1999, "currency": "eur", "customer": "cus_1"}
    key "order-1-email", effect "email", state pending, args {"to": "a@example.com"}`, b.mockT.failure())
	})

	t.Run("MissingFails", func(t *testing.T) {
		t.Parallel()
		b := setupMany(t, pool)

		requireManyEnqueued(t.Context(), b.mockT, b.pool, b.schema, []*ExpectedIntent{
			{Key: "order-1-charge"},
			{Key: "order-1-ticket"},
		})
		require.True(t, b.mockT.failed)
		require.Equal(t, `Expected intent 2 of 2: No intent matches key "order-1-ticket": none found in namespace "default" with key "order-1-ticket"`, b.mockT.failure())
	})

	t.Run("AmbiguousFails", func(t *testing.T) {
		t.Parallel()
		b := setupMany(t, pool)

		requireManyEnqueued(t.Context(), b.mockT, b.pool, b.schema, []*ExpectedIntent{{Effect: "charge"}})
		require.True(t, b.mockT.failed)
		require.True(t, strings.HasPrefix(b.mockT.failure(), `Expected intent 1 of 1: 2 intents match effect "charge", expected one`), b.mockT.failure())
	})

	t.Run("SameIntentTwiceFails", func(t *testing.T) {
		t.Parallel()
		b := setupMany(t, pool)

		requireManyEnqueued(t.Context(), b.mockT, b.pool, b.schema, []*ExpectedIntent{
			{Key: "order-1-email"},
			{Effect: "email"},
		})
		require.True(t, b.mockT.failed)
		require.True(t, strings.HasPrefix(b.mockT.failure(), `Expected intents 1 and 2 (key "order-1-email" and effect "email") match the same intent:`), b.mockT.failure())
	})

	t.Run("NoneExpectedFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		requireManyEnqueued(t.Context(), b.mockT, b.pool, b.schema, nil)
		require.True(t, b.mockT.failed)
		require.Contains(t, b.mockT.failure(), "RequireNotEnqueued")
	})
}

func TestRequireNotEnqueued(t *testing.T) {
	t.Parallel()

	t.Run("Passes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, b.pool, "order-1-charge", "charge", map[string]any{"amount": 1})

		requireNotEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Key: "order-2-charge"})
		requireNotEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Effect: "email"})
		requireNotEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Key: "order-1-charge", Args: map[string]any{"amount": 2}})
		requireNotEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Key: "order-1-charge", State: outbox.StateSucceeded})
		require.False(t, b.mockT.failed, b.mockT.failure())

		RequireNotEnqueued(t.Context(), t, b.pool, b.schema, &ExpectedIntent{Effect: "email"})
	})

	t.Run("FailsOnAMatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, b.pool, "order-1-charge", "charge", map[string]any{"amount": 1})

		requireNotEnqueued(t.Context(), b.mockT, b.pool, b.schema, &ExpectedIntent{Effect: "charge", Args: map[string]any{"amount": 1}})
		require.True(t, b.mockT.failed)
		require.Equal(t, `1 intent(s) match effect "charge", args {"amount":1}, expected none:`+"\n"+
			`    key "order-1-charge", effect "charge", state pending, args {"amount": 1}`, b.mockT.failure())
	})

	t.Run("NilFailsOnAnyIntent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		requireNotEnqueued(t.Context(), b.mockT, b.pool, b.schema, nil)
		require.False(t, b.mockT.failed, b.mockT.failure())

		b.enqueue(t, b.pool, "order-1-charge", "charge", map[string]any{"amount": 1})
		requireNotEnqueued(t.Context(), b.mockT, b.pool, b.schema, nil)
		require.True(t, b.mockT.failed)
		require.Contains(t, b.mockT.failure(), "1 intent(s) match anything, expected none")
	})

	t.Run("InATransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // the test's end
		b.enqueue(t, tx, "order-1-charge", "charge", map[string]any{"amount": 1})

		RequireNotEnqueued(t.Context(), t, b.pool, b.schema, &ExpectedIntent{Key: "order-1-charge"})
		requireNotEnqueued(t.Context(), b.mockT, tx, b.schema, &ExpectedIntent{Key: "order-1-charge"})
		require.True(t, b.mockT.failed)
		RequireNotEnqueuedTx(t.Context(), t, tx, b.schema, &ExpectedIntent{Key: "order-2-charge"})
	})
}

func TestMigrateSchema(t *testing.T) {
	t.Parallel()

	pool := testdb.Pool(t)
	var schema string
	t.Run("Migrates", func(t *testing.T) {
		schema = MigrateSchema(t.Context(), t, pool)
		require.True(t, strings.HasPrefix(schema, schemaPrefix), schema)
		migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
		require.NoError(t, err)
		status, err := migrator.Status(t.Context())
		require.NoError(t, err)
		require.True(t, status.UpToDate())
	})

	// The subtest's cleanup dropped it.
	var exists bool
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists)
}

package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
)

// Each Tx form acts in the caller's transaction: what it does is seen in
// that transaction, and undone by its rollback.
func TestTxForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// begin returns a transaction rolled back at the end of the test, if
	// the test did not end it.
	begin := func(t *testing.T, b *testBundle) pgx.Tx {
		t.Helper()
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		return tx
	}
	state := func(t *testing.T, b *testBundle, key string) outbox.State {
		t.Helper()
		intent, err := b.client.Get(ctx, outbox.NamespaceDefault, key)
		require.NoError(t, err)
		return intent.State
	}

	t.Run("EnqueueMany", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.client.EnqueueMany(ctx, []*outbox.EnqueueParams{
			{Key: "a", Effect: "noop", Args: map[string]any{}},
			{Key: "b", Effect: "noop", Args: map[string]any{}},
		})
		require.NoError(t, err)
		require.Len(t, res, 2)
		require.Equal(t, "b", res[1].Intent.Key)
		require.Equal(t, 2, b.count(t, "outbox_intent"), "committed")

		// A key reused for another action records none of the batch.
		_, err = b.client.EnqueueMany(ctx, []*outbox.EnqueueParams{
			{Key: "c", Effect: "noop", Args: map[string]any{}},
			{Key: "a", Effect: "noop", Args: map[string]any{"other": true}},
		})
		require.ErrorIs(t, err, outbox.ErrKeyReused)
		require.Equal(t, 2, b.count(t, "outbox_intent"))

		res, err = b.client.EnqueueMany(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, res)
	})

	t.Run("GetTxAndListTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx := begin(t, b)
		_, err := b.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)

		got, err := b.client.GetTx(ctx, tx, outbox.NamespaceDefault, "k")
		require.NoError(t, err)
		require.Equal(t, outbox.StatePending, got.State)
		list, err := b.client.ListTx(ctx, tx, &outbox.ListParams{})
		require.NoError(t, err)
		require.Len(t, list.Intents, 1)
		_, err = b.client.Get(ctx, outbox.NamespaceDefault, "k")
		require.ErrorIs(t, err, outbox.ErrNotFound, "not committed")

		require.NoError(t, tx.Rollback(ctx))
		_, err = b.client.Get(ctx, outbox.NamespaceDefault, "k")
		require.ErrorIs(t, err, outbox.ErrNotFound)
		list, err = b.client.List(ctx, &outbox.ListParams{})
		require.NoError(t, err)
		require.Empty(t, list.Intents)
	})

	t.Run("CancelTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)

		tx := begin(t, b)
		cancelled, err := b.client.CancelTx(ctx, tx, &outbox.CancelParams{Key: "k", By: "alice"})
		require.NoError(t, err)
		require.Equal(t, outbox.StateCancelled, cancelled.State)
		got, err := b.client.GetTx(ctx, tx, outbox.NamespaceDefault, "k")
		require.NoError(t, err)
		require.Equal(t, outbox.StateCancelled, got.State)
		// A refusal reads the intent in tx too.
		_, err = b.client.CancelTx(ctx, tx, &outbox.CancelParams{Key: "k"})
		require.ErrorIs(t, err, outbox.ErrNotCancellable)
		require.ErrorContains(t, err, "intent is cancelled")

		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, outbox.StatePending, state(t, b, "k"))
	})

	t.Run("ResolveTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		testfactory.Intent(ctx, t, b.pool, &testfactory.IntentOpts{
			Attempt: testfactory.Ptr(1), CompletedAt: testfactory.Ptr(time.Now()), JobID: testfactory.Ptr(int64(1)), Key: "k",
			MaybeSent: testfactory.Ptr(true), Schema: b.schema, State: outbox.StateUnknown,
		})

		tx := begin(t, b)
		resolved, err := b.client.ResolveTx(ctx, tx, &outbox.ResolveParams{Key: "k", Outcome: outbox.OutcomeFailed})
		require.NoError(t, err)
		require.Equal(t, outbox.StateFailed, resolved.State)
		got, err := b.client.GetTx(ctx, tx, outbox.NamespaceDefault, "k")
		require.NoError(t, err)
		require.Equal(t, outbox.StateFailed, got.State)
		_, err = b.client.ResolveTx(ctx, tx, &outbox.ResolveParams{Key: "k", Outcome: outbox.OutcomeFailed})
		require.ErrorIs(t, err, outbox.ErrNotUnknown)

		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, outbox.StateUnknown, state(t, b, "k"))
	})

	for _, tc := range []struct {
		name   string
		decide func(c *outbox.Client, ctx context.Context, tx outbox.Executor, p *outbox.ApprovalParams) (*outbox.Intent, error)
		want   outbox.State
	}{
		{"ApproveTx", (*outbox.Client).ApproveTx, outbox.StatePending},
		{"DenyTx", (*outbox.Client).DenyTx, outbox.StateCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			res, err := b.enqueue(t, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}, RequireApproval: true})
			require.NoError(t, err)
			params := &outbox.ApprovalParams{Key: "k", ArgsSHA256: res.Intent.ArgsSHA256, By: "alice"}

			tx := begin(t, b)
			decided, err := tc.decide(b.client, ctx, tx, params)
			require.NoError(t, err)
			require.Equal(t, tc.want, decided.State)
			got, err := b.client.GetTx(ctx, tx, outbox.NamespaceDefault, "k")
			require.NoError(t, err)
			require.Equal(t, tc.want, got.State)
			_, err = tc.decide(b.client, ctx, tx, params)
			require.ErrorIs(t, err, outbox.ErrNotAwaitingApproval)

			require.NoError(t, tx.Rollback(ctx))
			require.Equal(t, outbox.StateAwaitingApproval, state(t, b, "k"))

			// Committed, it holds.
			tx = begin(t, b)
			_, err = tc.decide(b.client, ctx, tx, params)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, tc.want, state(t, b, "k"))
		})
	}
}

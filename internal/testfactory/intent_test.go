package testfactory_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
)

func TestMain(m *testing.M) {
	testdb.Main(m)
}

func TestIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		tx, schema := testdb.TestTx(ctx, t)
		intent := testfactory.Intent(ctx, t, tx, &testfactory.IntentOpts{Schema: schema})
		require.NotZero(t, intent.ID)
		require.Equal(t, outbox.NamespaceDefault, intent.Namespace)
		require.NotEmpty(t, intent.Key)
		require.Equal(t, "noop", intent.Effect)
		require.JSONEq(t, `{}`, string(intent.Args))
		require.Equal(t, outbox.StatePending, intent.State)
		require.Zero(t, intent.Attempts)
		require.Equal(t, outbox.ProviderKey(intent.Namespace, intent.Key, intent.ID), intent.ProviderKey, "the table's trigger ran")

		other := testfactory.Intent(ctx, t, tx, &testfactory.IntentOpts{Schema: schema})
		require.NotEqual(t, intent.Key, other.Key)
	})

	t.Run("Columns", func(t *testing.T) {
		t.Parallel()
		tx, schema := testdb.TestTx(ctx, t)
		created := time.Now().Add(-2 * time.Hour).Truncate(time.Microsecond)
		completed := created.Add(time.Minute)
		intent := testfactory.Intent(ctx, t, tx, &testfactory.IntentOpts{
			Args:        json.RawMessage(`{"to": "a@example.com"}`),
			Attempt:     testfactory.Ptr(3),
			CompletedAt: &completed,
			CreatedAt:   &created,
			Effect:      "email",
			Error:       json.RawMessage(`{"code": "provider_unreachable", "message": "no answer"}`),
			Key:         "columns",
			MaybeSent:   testfactory.Ptr(true),
			Namespace:   "factory",
			RequestedBy: testfactory.Ptr("agent"),
			Schema:      schema,
			State:       outbox.StateUnknown,
		})
		require.Equal(t, "factory", intent.Namespace)
		require.Equal(t, "columns", intent.Key)
		require.Equal(t, "email", intent.Effect)
		require.JSONEq(t, `{"to": "a@example.com"}`, string(intent.Args))
		require.Equal(t, outbox.StateUnknown, intent.State)
		require.Equal(t, 3, intent.Attempts)
		require.True(t, created.Equal(intent.CreatedAt))
		require.NotNil(t, intent.CompletedAt)
		require.True(t, completed.Equal(*intent.CompletedAt))
		require.Equal(t, "provider_unreachable", intent.Error.Code)
		require.Equal(t, "agent", *intent.RequestedBy)

		var unknown int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM outbox_intent_unknown WHERE id = $1", intent.ID).Scan(&unknown))
		require.Equal(t, 1, unknown, "the insert triggers ran")

		var maybeSent bool
		var jobID *int64
		require.NoError(t, tx.QueryRow(ctx, "SELECT maybe_sent, job_id FROM outbox_intent WHERE id = $1", intent.ID).Scan(&maybeSent, &jobID))
		require.True(t, maybeSent)
		require.Nil(t, jobID)
	})

	t.Run("Job", func(t *testing.T) {
		t.Parallel()
		tx, schema := testdb.TestTx(ctx, t)
		lease := time.Now().Add(time.Minute)
		intent := testfactory.Intent(ctx, t, tx, &testfactory.IntentOpts{
			Attempt:        testfactory.Ptr(1),
			JobAttempt:     testfactory.Ptr(1),
			JobID:          testfactory.Ptr(int64(42)),
			LeaseExpiresAt: &lease,
			Result:         json.RawMessage(`{"id": "obj_1"}`),
			Schema:         schema,
			State:          outbox.StateRunning,
		})
		var jobID int64
		var jobAttempt int
		var leaseAt time.Time
		require.NoError(t, tx.QueryRow(ctx, "SELECT job_id, job_attempt, lease_expires_at FROM outbox_intent WHERE id = $1", intent.ID).Scan(&jobID, &jobAttempt, &leaseAt))
		require.Equal(t, int64(42), jobID)
		require.Equal(t, 1, jobAttempt)
		require.WithinDuration(t, lease, leaseAt, time.Millisecond)
		require.Equal(t, outbox.StateRunning, intent.State)
		require.JSONEq(t, `{"id": "obj_1"}`, string(intent.Result))
	})
}

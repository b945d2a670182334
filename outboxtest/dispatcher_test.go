package outboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/outbox"
)

// startCounting starts a dispatcher running effect in b's schema and returns
// a client that knows it.
func (b *testBundle) startCounting(t *testing.T, effect *CountingEffect) *outbox.Client {
	t.Helper()
	registry, err := effects.NewRegistry(effect)
	require.NoError(t, err)
	StartDispatcher(t.Context(), t, b.pool, &dispatcher.Config{Effects: registry, EffectTimeout: 5 * time.Second, Schema: b.schema})
	client, err := outbox.NewClient(b.pool, &outbox.Config{Effects: registry, Schema: b.schema})
	require.NoError(t, err)
	return client
}

func TestStartDispatcherAndWaitForEnd(t *testing.T) {
	t.Parallel()

	t.Run("RunsEachIntentOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		effect := NewCountingEffect(nil)
		client := b.startCounting(t, effect)

		for range 3 { // two retries of one action
			_, err := client.Enqueue(t.Context(), &outbox.EnqueueParams{Key: "k", Effect: CountingEffectNameDefault, Args: map[string]any{"n": 1}})
			require.NoError(t, err)
		}
		intent := WaitForEnd(t.Context(), t, client, "", "k")
		require.Equal(t, outbox.StateSucceeded, intent.State)
		require.JSONEq(t, `{"execution": 1}`, string(intent.Result))
		require.Equal(t, 1, effect.Count())

		calls := effect.Calls()
		require.Len(t, calls, 1)
		require.Equal(t, intent.ProviderKey, calls[0].ProviderKey)
		require.Equal(t, 1, calls[0].Attempt)
		require.JSONEq(t, `{"n": 1}`, string(calls[0].Args))
	})

	t.Run("ExecuteFuncDecides", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		effect := NewCountingEffect(&CountingEffectConfig{
			Name:      "refused",
			Guarantee: effects.GuaranteeAtMostOnce,
			ExecuteFunc: func(context.Context, *effects.Request) (json.RawMessage, error) {
				return nil, effects.Permanent("card_declined", errors.New("the card was declined"))
			},
		})
		require.Equal(t, effects.GuaranteeAtMostOnce, effect.Guarantee())
		client := b.startCounting(t, effect)

		_, err := client.Enqueue(t.Context(), &outbox.EnqueueParams{Key: "k", Effect: "refused", Args: map[string]any{}})
		require.NoError(t, err)
		intent := WaitForEnd(t.Context(), t, client, outbox.NamespaceDefault, "k")
		require.Equal(t, outbox.StateFailed, intent.State)
		require.Equal(t, "card_declined", intent.Error.Code)
		require.Equal(t, 1, effect.Count())
	})

	t.Run("WaitFailsAtTheDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// No dispatcher: the intent stays pending.
		_, err := b.client.Enqueue(t.Context(), &outbox.EnqueueParams{Key: "k", Effect: "charge", Args: map[string]any{}})
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		intent := waitForEnd(ctx, b.mockT, b.client, "", "k")
		require.Nil(t, intent)
		require.True(t, b.mockT.failed)
		require.Regexp(t, `^Intent with key "k" did not end within \S+: context deadline exceeded; last read pending after 0 attempt\(s\)$`, b.mockT.failure())
	})

	t.Run("WaitFailsOnAnUnknownKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		waitForEnd(t.Context(), b.mockT, b.client, "", "missing")
		require.True(t, b.mockT.failed)
		require.Contains(t, b.mockT.failure(), `Error waiting for intent with key "missing"`)
	})
}

func TestCountingEffect(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		effect := NewCountingEffect(nil)
		require.Equal(t, CountingEffectNameDefault, effect.Name())
		require.Equal(t, effects.GuaranteeDeduplicated, effect.Guarantee())
		require.NoError(t, effect.ValidateArgs(json.RawMessage(`{"anything": true}`)))
		require.Zero(t, effect.Count())
		require.Empty(t, effect.Calls())
	})

	t.Run("RegistersAsReconcilable", func(t *testing.T) {
		t.Parallel()
		effect := NewCountingEffect(&CountingEffectConfig{Name: "looked_up", Guarantee: effects.GuaranteeReconcilable})
		_, err := effects.NewRegistry(effect)
		require.NoError(t, err)

		_, found, err := effect.Lookup(t.Context(), "pk_1")
		require.NoError(t, err)
		require.False(t, found)

		result, err := effect.Execute(t.Context(), &effects.Request{ProviderKey: "pk_1", Attempt: 1, Args: json.RawMessage(`{}`)})
		require.NoError(t, err)
		got, found, err := effect.Lookup(t.Context(), "pk_1")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, result, got)
	})

	t.Run("CountsFailedExecutions", func(t *testing.T) {
		t.Parallel()
		effect := NewCountingEffect(&CountingEffectConfig{
			ExecuteFunc: func(context.Context, *effects.Request) (json.RawMessage, error) {
				return nil, effects.NotSent("connection_failed", errors.New("refused"))
			},
		})
		for range 2 {
			_, err := effect.Execute(t.Context(), &effects.Request{ProviderKey: "pk_1"})
			require.Error(t, err)
		}
		require.Equal(t, 2, effect.Count())
		_, found, err := effect.Lookup(t.Context(), "pk_1")
		require.NoError(t, err)
		require.False(t, found)
	})
}

func TestExampleTB(t *testing.T) {
	t.Parallel()

	t.Run("CleansUpLastFirst", func(t *testing.T) {
		t.Parallel()
		tb := NewExampleTB()
		var order []int
		tb.Cleanup(func() { order = append(order, 1) })
		tb.Cleanup(func() {
			order = append(order, 2)
			tb.Cleanup(func() { order = append(order, 3) })
		})
		ctx := tb.Context()
		tb.Close()
		require.Equal(t, []int{2, 3, 1}, order)
		require.Error(t, ctx.Err())
	})

	t.Run("FailurePanicsWithTheLog", func(t *testing.T) {
		t.Parallel()
		tb := NewExampleTB()
		defer tb.Close()
		tb.Log("found:", 2)
		require.PanicsWithValue(t, "found: 2\nwanted 1", func() { tb.Fatalf("wanted %d", 1) })
	})

	t.Run("AFailedAssertionPanics", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tb := NewExampleTB()
		defer tb.Close()
		require.PanicsWithValue(t, `outboxtest assertion failure:
    No intent matches key "k": none found in namespace "default" with key "k"`, func() {
			RequireEnqueued(t.Context(), tb, b.pool, b.schema, &ExpectedIntent{Key: "k"})
		})
	})
}

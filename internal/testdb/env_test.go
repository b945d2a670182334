package testdb_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

func TestNewEnv(t *testing.T) {
	t.Parallel()

	t.Run("DefaultNoop", func(t *testing.T) {
		t.Parallel()
		env := testdb.NewEnv(t, nil)
		require.Same(t, testdb.Pool(t), env.Pool)
		require.Regexp(t, namePattern, env.Schema)
		require.Equal(t, []string{"noop"}, env.Registry.Names())
		require.Zero(t, testdb.CountIntents(t, env.Pool, env.Schema))
		_, err := env.Client.Enqueue(context.Background(), &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
		require.Equal(t, 1, testdb.CountIntents(t, env.Pool, env.Schema))
	})

	t.Run("NamedNoops", func(t *testing.T) {
		t.Parallel()
		env := testdb.NewEnv(t, map[string]effects.Guarantee{"email": effects.GuaranteeAtMostOnce, "charge": effects.GuaranteeDeduplicated})
		require.ElementsMatch(t, []string{"charge", "email"}, env.Registry.Names())
		email, ok := env.Registry.Get("email")
		require.True(t, ok)
		require.Equal(t, effects.GuaranteeAtMostOnce, email.Guarantee())
	})
}

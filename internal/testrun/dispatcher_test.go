package testrun_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// TestMain runs the tests against the test database, then checks that the
// dispatchers they started were stopped, goroutines and all.
func TestMain(m *testing.M) {
	code := testdb.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestDispatcher(t *testing.T) {
	t.Parallel()

	env := testdb.NewEnv(t, nil)
	testrun.Dispatcher(t, env.Pool, &dispatcher.Config{Effects: env.Registry, Schema: env.Schema})
	ctx := context.Background()
	_, err := env.Client.Enqueue(ctx, &outbox.EnqueueParams{Key: "k", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	intent, err := env.Client.Wait(waitCtx, "", "k")
	require.NoError(t, err)
	require.Equal(t, outbox.StateSucceeded, intent.State)
}

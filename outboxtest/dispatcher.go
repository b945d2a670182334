package outboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/outbox"
)

// WaitTimeoutDefault bounds WaitForEnd when its context has no deadline.
const WaitTimeoutDefault = 30 * time.Second

// stopTimeout bounds the stop of a dispatcher StartDispatcher started. The
// cleanup cannot use the test's context, which has ended by then.
const stopTimeout = time.Minute

// StartDispatcher starts a dispatcher on pool with config (which must name
// the effects it runs, and the schema) and stops it when the test ends, so
// that the intents a test enqueues are executed as they would be in
// production. It fails the test if the dispatcher cannot start.
//
//	registry, err := effects.NewRegistry(charge)
//	...
//	outboxtest.StartDispatcher(ctx, t, pool, &dispatcher.Config{Effects: registry, Schema: schema})
//
// The dispatcher stops before the schema of MigrateSchema is dropped when
// that was created first, cleanups running last in, first out.
func StartDispatcher(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, config *dispatcher.Config) *dispatcher.Dispatcher {
	tb.Helper()
	d, err := dispatcher.New(pool, config)
	if err != nil {
		tb.Fatalf("outboxtest: error creating dispatcher: %s", err)
	}
	if err := d.Start(ctx); err != nil {
		tb.Fatalf("outboxtest: error starting dispatcher: %s", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			tb.Errorf("outboxtest: error stopping dispatcher: %s", err)
		}
	})
	return d
}

// WaitForEnd waits with client.Wait until the intent (namespace, key) ends
// and returns it, failing the test if it does not end before ctx's deadline
// (WaitTimeoutDefault from now when ctx has none). As Wait does, it also
// returns an intent that enters awaiting_approval, for which a person must
// act. A dispatcher must be running for the intent to end: see
// StartDispatcher.
func WaitForEnd(ctx context.Context, tb testing.TB, client *outbox.Client, namespace, key string) *outbox.Intent {
	tb.Helper()
	return waitForEnd(ctx, tb, client, namespace, key)
}

func waitForEnd(ctx context.Context, t testingT, client *outbox.Client, namespace, key string) *outbox.Intent {
	t.Helper()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, WaitTimeoutDefault)
		defer cancel()
	}
	start := time.Now()
	intent, err := client.Wait(ctx, namespace, key)
	switch {
	case err != nil && intent != nil:
		failuref(t, "Intent with key %q did not end within %s: %s; last read %s after %d attempt(s)",
			key, time.Since(start).Round(time.Millisecond), err, intent.State, intent.Attempts)
		return nil
	case err != nil:
		failuref(t, "Error waiting for intent with key %q: %s", key, err)
		return nil
	}
	return intent
}

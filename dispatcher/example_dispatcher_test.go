package dispatcher_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/outboxtest"
)

// Run the dispatcher in your process: it turns committed intents into River
// jobs and runs each intent's effect once, however many times the intent was
// enqueued.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	t := outboxtest.NewExampleTB() // in a test, the test's *testing.T
	defer t.Close()
	schema := outboxtest.MigrateSchema(ctx, t, pool)

	// A stand-in for a real charge effect that counts its executions.
	charge := outboxtest.NewCountingEffect(&outboxtest.CountingEffectConfig{Name: "charge"})
	registry, err := effects.NewRegistry(charge)
	if err != nil {
		panic(err)
	}

	d, err := dispatcher.New(pool, &dispatcher.Config{Effects: registry, Schema: schema})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	// Stop lets running attempts finish (within the effect timeout).
	defer d.Stop(ctx) //nolint:errcheck // the example's end

	client, err := outbox.NewClient(pool, &outbox.Config{Effects: registry, Schema: schema})
	if err != nil {
		panic(err)
	}
	for range 3 { // the first call, then two retries of it
		if _, err := client.Enqueue(ctx, &outbox.EnqueueParams{
			Key:    "order-1234-charge",
			Effect: "charge",
			Args:   map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"},
		}); err != nil {
			panic(err)
		}
	}

	intent := outboxtest.WaitForEnd(ctx, t, client, outbox.NamespaceDefault, "order-1234-charge")
	fmt.Println(intent.State, string(intent.Result), "executions:", charge.Count())

	// Output:
	// succeeded {"execution": 1} executions: 1
}

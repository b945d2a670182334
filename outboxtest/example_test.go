package outboxtest_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/outboxtest"
)

// A test of a service's checkout, which enqueues a charge in the order's
// transaction: RequireEnqueuedTx finds the intent before the transaction
// commits, and a dispatcher running a counting stand-in for the charge effect
// shows that a retried checkout charges once.
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

	charge := outboxtest.NewCountingEffect(&outboxtest.CountingEffectConfig{Name: "charge"})
	registry, err := effects.NewRegistry(charge)
	if err != nil {
		panic(err)
	}
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: registry, Schema: schema})
	if err != nil {
		panic(err)
	}

	// checkout is the code under test.
	checkout := func(tx pgx.Tx, order int) error {
		// ... the order's own writes, in tx ...
		_, err := client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{
			Key:    fmt.Sprintf("order-%d-charge", order),
			Effect: "charge",
			Args:   map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"},
		})
		return err
	}

	for range 2 { // the checkout, then a retry of it
		tx, err := pool.Begin(ctx)
		if err != nil {
			panic(err)
		}
		if err := checkout(tx, 1234); err != nil {
			panic(err)
		}
		intent := outboxtest.RequireEnqueuedTx(ctx, t, tx, schema, &outboxtest.ExpectedIntent{
			Key:    "order-1234-charge",
			Effect: "charge",
			Args:   map[string]any{"amount": 1999, "currency": "eur", "customer": "cus_1"},
		})
		fmt.Println("enqueued:", intent.State)
		if err := tx.Commit(ctx); err != nil {
			panic(err)
		}
	}
	outboxtest.RequireNotEnqueued(ctx, t, pool, schema, &outboxtest.ExpectedIntent{Key: "order-1235-charge"})

	outboxtest.StartDispatcher(ctx, t, pool, &dispatcher.Config{Effects: registry, Schema: schema})
	intent := outboxtest.WaitForEnd(ctx, t, client, outbox.NamespaceDefault, "order-1234-charge")
	fmt.Println("ended:", intent.State, "charges:", charge.Count())

	// Output:
	// enqueued: pending
	// enqueued: pending
	// ended: succeeded charges: 1
}

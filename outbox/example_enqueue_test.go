package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/outboxtest"
)

// Record an intent in your own transaction, next to your own writes: it is
// committed with them or rolled back with them. A retry of the same action
// under the same key is answered with the first intent; the same key for
// another action is refused.
func Example_enqueueInYourTransaction() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	t := outboxtest.NewExampleTB() // in a test, the test's *testing.T
	defer t.Close()
	schema := outboxtest.MigrateSchema(ctx, t, pool)

	// Without Config.Effects any effect name is accepted and the
	// dispatcher validates the arguments; with it, EnqueueTx refuses an
	// unknown effect or bad arguments before anything is written.
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}

	charge := &outbox.EnqueueParams{
		Key:    "order-1234-charge",
		Effect: "charge",
		Args:   map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"},
	}
	enqueue := func(params *outbox.EnqueueParams) (*outbox.EnqueueResult, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
		// ... the caller's own writes, in tx ...
		res, err := client.EnqueueTx(ctx, tx, params)
		if err != nil {
			return nil, err
		}
		return res, tx.Commit(ctx)
	}

	first, err := enqueue(charge)
	if err != nil {
		panic(err)
	}
	fmt.Println("first:", first.Intent.State, "duplicate:", first.Duplicate)

	// The framework retries: same key, same action.
	again, err := enqueue(charge)
	if err != nil {
		panic(err)
	}
	fmt.Println("retry:", again.Intent.State, "duplicate:", again.Duplicate, "same intent:", again.Intent.ID == first.Intent.ID)

	// A bug reuses the key for another amount.
	_, err = enqueue(&outbox.EnqueueParams{
		Key:    "order-1234-charge",
		Effect: "charge",
		Args:   map[string]any{"customer": "cus_1", "amount": 2999, "currency": "eur"},
	})
	var reused *outbox.KeyReusedError
	fmt.Println("other args:", errors.Is(err, outbox.ErrKeyReused), errors.As(err, &reused) && reused.Existing.ID == first.Intent.ID)

	// Output:
	// first: pending duplicate: false
	// retry: pending duplicate: true same intent: true
	// other args: true true
}

// Record many intents in one statement: all of them, or none when one key
// was already used for another action.
func ExampleClient_EnqueueManyTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	t := outboxtest.NewExampleTB() // in a test, the test's *testing.T
	defer t.Close()
	schema := outboxtest.MigrateSchema(ctx, t, pool)

	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	params := make([]*outbox.EnqueueParams, 0, 1000)
	for i := range 1000 {
		params = append(params, &outbox.EnqueueParams{
			Key:    fmt.Sprintf("welcome-email-%d", i),
			Effect: "email",
			Args:   map[string]any{"to": []string{fmt.Sprintf("user%d@example.com", i)}, "subject": "Welcome", "text": "Hello!"},
		})
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	results, err := client.EnqueueManyTx(ctx, tx, params)
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	fmt.Println(len(results), "intents, the first", results[0].Intent.Key, results[0].Intent.State)

	// Output:
	// 1000 intents, the first welcome-email-0 pending
}

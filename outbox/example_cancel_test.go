package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/outboxtest"
)

// Cancel an intent in your own transaction, next to your own writes: an
// order cancelled in your tables cancels its charge, and a rollback keeps
// both. Each operation on intents has such a Tx form (EnqueueTx,
// EnqueueManyTx, GetTx, ListTx, CancelTx, ResolveTx, ApproveTx, DenyTx).
func Example_cancelInYourTransaction() {
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
	if _, err := client.Enqueue(ctx, &outbox.EnqueueParams{
		Key:    "order-1234-charge",
		Effect: "charge",
		Args:   map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"},
	}); err != nil {
		panic(err)
	}

	errOrderShipped := errors.New("the order has shipped")
	cancelOrder := func(shipped bool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			intent, err := client.CancelTx(ctx, tx, &outbox.CancelParams{Key: "order-1234-charge", By: "shop"})
			if err != nil {
				return err
			}
			fmt.Println("in the transaction:", intent.State)
			// ... the caller's own writes, in tx, which may fail ...
			if shipped {
				return errOrderShipped
			}
			return nil
		})
	}

	fmt.Println("first try:", cancelOrder(true))
	intent, err := client.Get(ctx, outbox.NamespaceDefault, "order-1234-charge")
	if err != nil {
		panic(err)
	}
	fmt.Println("after the rollback:", intent.State)

	fmt.Println("second try:", cancelOrder(false))
	intent, err = client.Get(ctx, outbox.NamespaceDefault, "order-1234-charge")
	if err != nil {
		panic(err)
	}
	fmt.Println("after the commit:", intent.State)

	// Output:
	// in the transaction: cancelled
	// first try: the order has shipped
	// after the rollback: pending
	// in the transaction: cancelled
	// second try: <nil>
	// after the commit: cancelled
}

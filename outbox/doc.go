// Package outbox is the write side of the outbox: a service records an
// intended side effect (an intent: effect name, arguments and idempotency key)
// in Postgres inside its own transaction, and the dispatcher (package
// dispatcher) executes it once.
//
// An enqueue writes exactly one row, in one statement, in the caller's
// transaction, so a rolled-back caller leaves nothing behind and a committed
// one leaves an intent that will be executed. The caller needs no River
// client. Duplicates of a key are answered with the first intent, whatever
// its state; a key reused for another action is refused with ErrKeyReused.
//
//	registry, err := effects.NewRegistry(myEffects...)
//	...
//	client, err := outbox.NewClient(pool, &outbox.Config{Effects: registry})
//	...
//	tx, err := pool.Begin(ctx)
//	...
//	res, err := client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{
//		Key:    "order-1234-charge",
//		Effect: "charge",
//		Args:   map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"},
//	})
//	...
//	err = tx.Commit(ctx)
//
// An enqueue whose context carries an OpenTelemetry span records it as the
// intent's W3C traceparent (the outbox_intent column traceparent), so that
// the attempts' spans, in the dispatcher's process, can link to the
// enqueue's; a duplicate keeps the first enqueue's.
//
// A caller with no transaction to join calls Enqueue, which records the
// intent in a transaction of its own; concurrent calls on one Client share a
// statement and its commit, each answered as if it had gone alone.
//
// Reads (Get, List, Wait) and the operator's Cancel and Resolve work on the
// client's pool. The package's examples are complete programs, run by go test
// against a real database; effects' Example_customEffect adds an effect of
// one's own and an in-process dispatcher.
package outbox

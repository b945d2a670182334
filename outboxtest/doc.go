// Package outboxtest contains helpers for a service's own tests of the code
// that enqueues intents, in the manner of River's rivertest: assertions that
// an intent was (or was not) enqueued, a dispatcher run for the length of a
// test, a wait for an intent's end, a stand-in effect that counts its
// executions, and a throwaway migrated schema.
//
// The helpers take the test's testing.TB and fail it, with a message listing
// what was found, when an expectation does not hold:
//
//	func TestCheckout(t *testing.T) {
//		ctx := t.Context()
//		schema := outboxtest.MigrateSchema(ctx, t, pool)
//		client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
//		...
//		// The code under test enqueues in its own transaction.
//		...
//		intent := outboxtest.RequireEnqueuedTx(ctx, t, tx, schema, &outboxtest.ExpectedIntent{
//			Key:    "order-1234-charge",
//			Effect: "charge",
//			Args:   map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"},
//		})
//	}
//
// The database is the test's own: outboxtest opens no connection and reads
// no environment variable. MigrateSchema gives each test a schema of its own
// in it, so that tests run in parallel and leave nothing behind.
//
// An Example function has no testing.TB: ExampleTB stands in for one there.
// This module's examples connect to TEST_DATABASE_URL (which their package's
// TestMain sets to a throwaway PostgreSQL cluster when it is unset) and use
// ExampleTB, so that they read as a test would.
package outboxtest

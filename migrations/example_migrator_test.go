package migrations_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outboxtest"
)

// Migrate a schema before the dispatcher and the clients use it, as outboxd
// migrate does: River's migrations, then outbox's. Up applies only what is
// pending, under a lock, so replicas that start together may all call it.
// In a test, outboxtest.MigrateSchema migrates a schema of the test's own.
func ExampleMigrator_Up() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	t := outboxtest.NewExampleTB() // in a test, the test's *testing.T
	defer t.Close()
	schema := outboxtest.MigrateSchema(ctx, t, pool)

	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	// The newest outbox migration reverted, as when going back a release.
	if _, err := migrator.Down(ctx, nil); err != nil {
		panic(err)
	}
	status, err := migrator.Status(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("up to date:", status.UpToDate(), "outbox at the latest:", status.OutboxCurrent == migrations.Latest())

	res, err := migrator.Up(ctx)
	if err != nil {
		panic(err)
	}
	for _, applied := range res.Applied {
		fmt.Println("applied:", applied.Component, applied.Version == migrations.Latest())
	}
	if status, err = migrator.Status(ctx); err != nil {
		panic(err)
	}
	fmt.Println("up to date:", status.UpToDate())

	// Output:
	// up to date: false outbox at the latest: false
	// applied: outbox true
	// up to date: true
}

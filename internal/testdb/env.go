package testdb

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/outbox"
)

// Env is what most tests of the write side start from: a migrated schema of
// their own, noop effects that record in it, and a client.
type Env struct {
	// Client enqueues and reads intents in Schema with Registry's effects.
	Client *outbox.Client

	// Pool is the package's shared pool (see Pool).
	Pool *pgxpool.Pool

	// Registry holds the noop effects the Env was made with.
	Registry *effects.Registry

	// Schema is the migrated schema, the test's alone until it ends.
	Schema string
}

// NewEnv returns an Env on an empty migrated schema (see MigratedSchema) whose
// registry holds a noop effect (package noop) for each entry of noops: its
// name, and the guarantee it claims. Without noops it holds one effect, noop,
// deduplicated.
func NewEnv(tb testing.TB, noops map[string]effects.Guarantee) *Env {
	tb.Helper()
	pool, schema := MigratedSchema(tb)
	if len(noops) == 0 {
		noops = map[string]effects.Guarantee{noop.NameDefault: effects.GuaranteeDeduplicated}
	}
	// In name order, so that a failure reads the same every run.
	list := make([]effects.Effect, 0, len(noops))
	for _, name := range slices.Sorted(maps.Keys(noops)) {
		e, err := noop.New(&noop.Config{Name: name, Guarantee: noops[name], Pool: pool, Schema: schema})
		if err != nil {
			tb.Fatalf("testdb: error creating noop effect %s: %v", name, err)
		}
		list = append(list, e)
	}
	registry, err := effects.NewRegistry(list...)
	if err != nil {
		tb.Fatalf("testdb: error creating registry: %v", err)
	}
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: registry, Schema: schema})
	if err != nil {
		tb.Fatalf("testdb: error creating client: %v", err)
	}
	return &Env{Client: client, Pool: pool, Registry: registry, Schema: schema}
}

// CountIntents returns the number of intents in schema, whatever their
// namespace and state.
func CountIntents(tb testing.TB, pool *pgxpool.Pool, schema string) int {
	tb.Helper()
	var n int
	err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, "outbox_intent"}.Sanitize()).Scan(&n)
	if err != nil {
		tb.Fatalf("testdb: error counting intents: %v", err)
	}
	return n
}

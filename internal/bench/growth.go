package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/outbox"
)

// GrowthResult is what an intent table holding Terminal finished intents
// costs (docs/design.md, "Cost as the table grows").
type GrowthResult struct {
	// Terminal is how many terminal intents the table held.
	Terminal int `json:"terminal"`
	// FillTime is how long writing them took (one INSERT ... SELECT,
	// through the insert trigger and every index, then VACUUM ANALYZE).
	FillTime time.Duration `json:"fill_ns"`
	// TableBytes and IndexBytes are the table's (with TOAST) and its
	// indexes' sizes after the fill.
	TableBytes int64 `json:"table_bytes"`
	IndexBytes int64 `json:"index_bytes"`
	// EnqueueP50 and EnqueueP99 are one caller's EnqueueTx, each in its own
	// transaction, with nothing else running.
	EnqueueP50 time.Duration `json:"enqueue_p50_ns"`
	EnqueueP99 time.Duration `json:"enqueue_p99_ns"`
	// Drain is the deduplicated noop lane at its maximum rate on this table.
	Drain *Result `json:"drain"`
	// Pruned is how many intents past retention the prune deleted (an
	// eighth of Terminal: their completions are spread over 8 days and
	// retention is 7), in PruneTime, by the prune job's batches of 1,000.
	Pruned    int64         `json:"pruned"`
	PruneTime time.Duration `json:"prune_ns"`
	// EnqueueDuringPruneP99 is the caller's p99 while the prune ran.
	EnqueueDuringPruneP99 time.Duration `json:"enqueue_during_prune_p99_ns"`
}

// growthEnqueues is how many enqueues each latency figure samples.
const growthEnqueues = 2000

// Growth measures, for each size, a fresh schema whose intent table holds
// that many terminal intents: its size, enqueue latency, drain rate, and
// the cost of pruning a day's intents.
func Growth(ctx context.Context, pool *pgxpool.Pool, sizes []int, cfg *Config) ([]*GrowthResult, error) {
	cfg = cfg.withDefaults()
	var out []*GrowthResult
	for _, n := range sizes {
		cfg.Logger.InfoContext(ctx, "measuring a table of terminal intents", slog.Int("terminal", n))
		r, err := growthOne(ctx, pool, n, cfg)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func growthOne(ctx context.Context, pool *pgxpool.Pool, n int, cfg *Config) (*GrowthResult, error) {
	schema, drop, err := throwawaySchema(ctx, pool, cfg)
	if err != nil {
		return nil, err
	}
	defer drop()
	table := pgx.Identifier{schema, "outbox_intent"}.Sanitize()
	r := &GrowthResult{Terminal: n}

	// The rows the prune finds: succeeded, completed over the last 8 days.
	start := time.Now()
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (namespace, key, effect, args, state, attempt, result, completed_at, created_at, updated_at)
		SELECT 'bench', 'fill-' || g, 'noop', jsonb_build_object('n', g, 'customer', 'cus_' || (g % 1000)), 'succeeded', 1,
		       jsonb_build_object('id', 'noop_' || g), c, c, c
		FROM generate_series(1, $1::bigint) g, LATERAL (SELECT now() - (g::float8 / $1) * interval '8 days' AS c) t`, n); err != nil {
		return nil, fmt.Errorf("error filling the table: %w", err)
	}
	// Terminal intents were handed over long ago: the drain's stream
	// starts after them, as it would have.
	if _, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "outbox_drain_offset"}.Sanitize()+` SET prev = pg_current_snapshot(), cur = NULL`); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return nil, err
	}
	r.FillTime = time.Since(start)
	if err := pool.QueryRow(ctx, "SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass)", table).Scan(&r.TableBytes, &r.IndexBytes); err != nil {
		return nil, err
	}

	e, err := noop.New(nil)
	if err != nil {
		return nil, err
	}
	reg, err := effects.NewRegistry(e)
	if err != nil {
		return nil, err
	}
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
	if err != nil {
		return nil, err
	}
	lat, err := enqueueLatencies(ctx, pool, client, "quiet", nil)
	if err != nil {
		return nil, err
	}
	r.EnqueueP50, r.EnqueueP99 = pct(lat, 0.5), pct(lat, 0.99)

	// The prune, with a caller enqueuing meanwhile.
	var (
		wg        sync.WaitGroup
		pruneErr  error
		pruneDone = make(chan struct{})
	)
	q := intentdb.New(schema)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(pruneDone)
		t0 := time.Now()
		for {
			deleted, err := q.Prune(ctx, pool, 7*24*time.Hour, 1000)
			r.Pruned += deleted
			if err != nil {
				pruneErr = err
				return
			}
			if deleted < 1000 {
				break
			}
		}
		r.PruneTime = time.Since(t0)
	}()
	lat, err = enqueueLatencies(ctx, pool, client, "pruning", pruneDone)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if pruneErr != nil {
		return nil, fmt.Errorf("error pruning: %w", pruneErr)
	}
	r.EnqueueDuringPruneP99 = pct(lat, 0.99)

	// Remove what the latency runs left (pending, never dispatched) so the
	// drain lane measures its own units only.
	if _, err := pool.Exec(ctx, "DELETE FROM "+table+" WHERE state = 'pending'"); err != nil {
		return nil, err
	}
	if r.Drain, err = runIn(ctx, pool, schema, Kinds[2], cfg, 0); err != nil {
		return nil, err
	}
	return r, nil
}

// enqueueLatencies times growthEnqueues EnqueueTx calls, each in its own
// transaction, one after another; with until set, it stops early once
// until is closed (and keeps at least 100 samples).
func enqueueLatencies(ctx context.Context, pool *pgxpool.Pool, client *outbox.Client, label string, until <-chan struct{}) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, growthEnqueues)
	for i := range growthEnqueues {
		if until != nil && len(lat) >= 100 && closed(until) {
			break
		}
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{
				Key: fmt.Sprintf("growth-%s-%d", label, i), Effect: "noop", Args: map[string]any{"n": i},
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat, nil
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/outbox"
)

// BatchSize is the units per transaction of the batch lanes.
const BatchSize = 1000

// BatchComparison is River's InsertManyTx against outbox's EnqueueManyTx,
// BatchSize units a transaction, inserts only (nothing runs them).
type BatchComparison struct {
	River  *Result `json:"river"`
	Outbox *Result `json:"outbox"`
}

// Ratio is outbox's rate over River's.
func (c *BatchComparison) Ratio() float64 { return c.Outbox.Rate / c.River.Rate }

// CompareBatch measures cfg.Count units (rounded up to whole batches) of
// each, one caller, in fresh schemas it drops afterwards. Rate is units per
// second; TxP50 and TxP99 are per transaction of BatchSize. Like Compare, it
// first returns a *ConnectionsError if the server would not take the
// connections it needs.
func CompareBatch(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*BatchComparison, error) {
	cfg = cfg.withDefaults()
	if err := checkConnections(ctx, pool, int(pool.Config().MaxConns)+batchPoolSize); err != nil {
		return nil, err
	}
	batches := max(1, (cfg.Count+BatchSize-1)/BatchSize)
	out := &BatchComparison{}
	var err error
	cfg.Logger.InfoContext(ctx, "measuring batch inserts", slog.Int("batches", batches))
	if out.River, err = runBatch(ctx, pool, cfg, "river InsertManyTx", batches, riverBatch); err != nil {
		return nil, err
	}
	if out.Outbox, err = runBatch(ctx, pool, cfg, "outbox EnqueueManyTx", batches, outboxBatch); err != nil {
		return nil, err
	}
	return out, nil
}

// batchInserter returns a function that commits batch number b in tx.
type batchInserter func(ctx context.Context, pool *pgxpool.Pool, schema string) (func(ctx context.Context, tx pgx.Tx, b int) error, error)

func riverBatch(_ context.Context, pool *pgxpool.Pool, schema string) (func(context.Context, pgx.Tx, int) error, error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	rc := riverConfig(schema, 1)
	rc.Workers = ws
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx pgx.Tx, b int) error {
		params := make([]river.InsertManyParams, BatchSize)
		for i := range params {
			params[i] = river.InsertManyParams{Args: NoopArgs{N: b*BatchSize + i}}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	}, nil
}

func outboxBatch(_ context.Context, pool *pgxpool.Pool, schema string) (func(context.Context, pgx.Tx, int) error, error) {
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
	return func(ctx context.Context, tx pgx.Tx, b int) error {
		params := make([]*outbox.EnqueueParams, BatchSize)
		for i := range params {
			n := b*BatchSize + i
			params[i] = &outbox.EnqueueParams{Key: fmt.Sprintf("batch-%d", n), Effect: "noop", Args: map[string]any{"n": n}}
		}
		_, err := client.EnqueueManyTx(ctx, tx, params)
		return err
	}, nil
}

func runBatch(ctx context.Context, shared *pgxpool.Pool, cfg *Config, name string, batches int, newInserter batchInserter) (*Result, error) {
	schema, drop, err := throwawaySchema(ctx, shared, cfg)
	if err != nil {
		return nil, err
	}
	defer drop()
	pool, err := newLanePool(ctx, shared, schema, batchPoolSize)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	insert, err := newInserter(ctx, pool, schema)
	if err != nil {
		return nil, err
	}
	before, err := readCost(ctx, pool, schema)
	if err != nil {
		return nil, err
	}
	rss := sampleRSS()
	defer rss.stop()
	txTimes := make([]time.Duration, 0, batches)
	start := time.Now()
	for b := range batches {
		t0 := time.Now()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return insert(ctx, tx, b) }); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		txTimes = append(txTimes, time.Since(t0))
		if cfg.ProgressFunc != nil {
			cfg.ProgressFunc(name, (b+1)*BatchSize, batches*BatchSize)
		}
	}
	elapsed := time.Since(start)
	slices.Sort(txTimes)
	if err := closeLanePool(ctx, shared, pool, schema); err != nil {
		return nil, err
	}
	after, err := readCost(ctx, shared, schema)
	if err != nil {
		return nil, err
	}
	cost, err := costBetween(ctx, shared, before, after, batches*BatchSize)
	if err != nil {
		return nil, err
	}
	return &Result{
		Cost:    cost,
		Name:    name,
		Count:   batches * BatchSize,
		Elapsed: elapsed,
		Rate:    float64(batches*BatchSize) / elapsed.Seconds(),
		TxP50:   pct(txTimes, 0.50),
		TxP99:   pct(txTimes, 0.99),
		PeakRSS: rss.stop(),
	}, nil
}

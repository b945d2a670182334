package riverworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// PruneBatchSizeDefault is PruneWorkerConfig.BatchSize's default.
const PruneBatchSizeDefault = 1000

// PruneWorkerConfig configures a PruneWorker.
type PruneWorkerConfig struct {
	// BatchSize is how many intents one DELETE removes; each batch is its own
	// statement, so pruning never holds many row locks or a long transaction.
	// Defaults to PruneBatchSizeDefault.
	BatchSize int
	// Logger receives a line per run that pruned something. Defaults to a
	// logger that discards.
	Logger *slog.Logger
	// Retention is how long a terminal intent (and so its key) is kept.
	// Defaults to workers.RetentionDefault.
	Retention time.Duration
	// Schema holds the outbox tables. Defaults to "outbox".
	Schema string
}

// PruneWorker deletes terminal intents older than the retention. Non-terminal
// intents are never deleted: the prunable index holds only terminal ones.
type PruneWorker struct {
	river.WorkerDefaults[workers.PruneArgs]

	batchSize int
	logger    *slog.Logger
	pool      *pgxpool.Pool
	queries   *intentdb.Queries
	retention time.Duration
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *PruneWorkerConfig) withDefaults() *PruneWorkerConfig {
	if c == nil {
		c = &PruneWorkerConfig{}
	}
	out := *c
	if out.BatchSize == 0 {
		out.BatchSize = PruneBatchSizeDefault
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Retention == 0 {
		out.Retention = workers.RetentionDefault
	}
	if out.Schema == "" {
		out.Schema = outbox.SchemaDefault
	}
	return &out
}

// validate checks a config with its defaults.
func (c *PruneWorkerConfig) validate() error {
	if c.BatchSize < 0 || c.Retention < 0 {
		return errors.New("workers: BatchSize and Retention must be positive")
	}
	return nil
}

// NewPruneWorker returns a PruneWorker.
func NewPruneWorker(pool *pgxpool.Pool, config *PruneWorkerConfig) (*PruneWorker, error) {
	c := config.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &PruneWorker{batchSize: c.BatchSize, logger: c.Logger, pool: pool, queries: intentdb.New(c.Schema), retention: c.Retention}, nil
}

// Work prunes in batches until a batch comes back short.
func (w *PruneWorker) Work(ctx context.Context, job *river.Job[workers.PruneArgs]) error {
	total, err := w.Prune(ctx)
	if total > 0 {
		w.logger.InfoContext(ctx, "pruned terminal intents past retention", slog.Int64("count", total), slog.Duration("retention", w.retention))
	}
	return err
}

// Prune deletes every terminal intent past retention and returns how many.
func (w *PruneWorker) Prune(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := w.queries.Prune(ctx, w.pool, w.retention, w.batchSize)
		if err != nil {
			return total, fmt.Errorf("error pruning intents: %w", err)
		}
		total += n
		if n < int64(w.batchSize) {
			// The model-key guard's records of agents' recent actions
			// are only ever looked at within a window of minutes.
			if _, err := w.queries.PruneRecentActions(ctx, w.pool, w.retention); err != nil {
				return total, fmt.Errorf("error pruning recent actions: %w", err)
			}
			return total, nil
		}
	}
}

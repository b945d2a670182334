package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Cost is what a lane cost the database per action (a unit: a job, an
// intent, a message), from counters read before and after its measurement.
//
// WALBytesPerAction is the server's WAL position moved, so it counts
// everything written on the server meanwhile (run the bench on a quiet
// server). The other two come from pg_stat_user_tables for the tables of
// the lane's own schema only, River's included.
type Cost struct {
	// WALBytesPerAction is pg_current_wal_lsn()'s advance over the
	// measurement, divided by the actions.
	WALBytesPerAction float64 `json:"wal_bytes_per_action"`
	// IndexTuplesPerAction is the index entries written per action: every
	// insert and every update that is not HOT writes one entry into each of
	// the table's indexes. PostgreSQL 15 counts no index insertions, so
	// this is computed from the tables' counters and their index counts;
	// a partial index whose predicate the new row fails gets no entry, so
	// for a table with partial indexes it is an upper bound.
	IndexTuplesPerAction float64 `json:"index_tuples_per_action"`
	// HOTUpdateShare is the share of row updates that were HOT (no index
	// entry written, the new version on the same page), 0 to 1; 0 when
	// nothing was updated.
	HOTUpdateShare float64 `json:"hot_update_share"`
	// UpdatesPerAction and InsertsPerAction are the row writes behind the
	// two figures above, per action (DeletesPerAction the deletions).
	InsertsPerAction float64 `json:"inserts_per_action"`
	UpdatesPerAction float64 `json:"updates_per_action"`
	DeletesPerAction float64 `json:"deletes_per_action"`
}

// costCounters is one reading of the counters Cost is computed from.
type costCounters struct {
	walLSN                         string
	inserts, updates, hot, deletes int64
	indexTuples                    int64
}

// readCost reads the server's WAL position and the write counters of
// schema's tables.
//
// PostgreSQL 15 keeps a backend's table counters in the backend until it
// flushes them: at the end of a transaction at most once a second, and an
// idle backend within about ten seconds. So before reading, every idle
// connection of pool runs pg_stat_force_next_flush(), which makes that
// backend flush as the statement ends, before it answers. The lane's
// clients (River's, the dispatcher's, the callers') have stopped and
// returned their connections to pool by then; connections that closed
// flushed as their backends exited. Reading counters the next moment, in a
// statement of its own, sees them all (stats_fetch_consistency caches a
// snapshot only within a transaction).
func readCost(ctx context.Context, pool *pgxpool.Pool, schema string) (*costCounters, error) {
	for _, c := range pool.AcquireAllIdle(ctx) {
		_, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		c.Release()
		if err != nil {
			return nil, fmt.Errorf("bench: error flushing statistics: %w", err)
		}
	}
	var c costCounters
	// A table's index entries: one per index for each insert and each
	// update that was not HOT (see Cost.IndexTuplesPerAction).
	err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text,
			coalesce(sum(t.n_tup_ins), 0)::bigint, coalesce(sum(t.n_tup_upd), 0)::bigint,
			coalesce(sum(t.n_tup_hot_upd), 0)::bigint, coalesce(sum(t.n_tup_del), 0)::bigint,
			coalesce(sum((t.n_tup_ins + t.n_tup_upd - t.n_tup_hot_upd) *
				(SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid)), 0)::bigint
		FROM pg_stat_user_tables t WHERE t.schemaname = $1`, schema).
		Scan(&c.walLSN, &c.inserts, &c.updates, &c.hot, &c.deletes, &c.indexTuples)
	if err != nil {
		return nil, fmt.Errorf("bench: error reading the write counters: %w", err)
	}
	return &c, nil
}

// costBetween is the cost per action of actions done between two readings.
func costBetween(ctx context.Context, pool *pgxpool.Pool, before, after *costCounters, actions int) (*Cost, error) {
	var wal int64
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, after.walLSN, before.walLSN).Scan(&wal); err != nil {
		return nil, fmt.Errorf("bench: error computing WAL written: %w", err)
	}
	n := float64(max(1, actions))
	c := &Cost{
		WALBytesPerAction:    float64(wal) / n,
		IndexTuplesPerAction: float64(after.indexTuples-before.indexTuples) / n,
		InsertsPerAction:     float64(after.inserts-before.inserts) / n,
		UpdatesPerAction:     float64(after.updates-before.updates) / n,
		DeletesPerAction:     float64(after.deletes-before.deletes) / n,
	}
	if upd := after.updates - before.updates; upd > 0 {
		c.HOTUpdateShare = float64(after.hot-before.hot) / float64(upd)
	}
	return c, nil
}

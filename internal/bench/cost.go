package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	// Tables are the same figures for each table the lane wrote, by name
	// (WAL is not counted by table).
	Tables map[string]*TableCost `json:"tables,omitempty"`
}

// TableCost is one table's part of a Cost.
type TableCost struct {
	IndexTuplesPerAction float64 `json:"index_tuples_per_action"`
	HOTUpdateShare       float64 `json:"hot_update_share"`
	InsertsPerAction     float64 `json:"inserts_per_action"`
	UpdatesPerAction     float64 `json:"updates_per_action"`
	DeletesPerAction     float64 `json:"deletes_per_action"`
}

// costCounters is one reading of the counters Cost is computed from.
type costCounters struct {
	walLSN string
	tables map[string]tableCounters
}

// tableCounters are one table's write counters.
type tableCounters struct {
	inserts, updates, hot, deletes, indexTuples int64
}

// newLanePool opens a pool of the lane's own of size connections, like
// pool otherwise and named by application_name, so that its backends can
// be told apart from those of whoever else shares pool (a test running
// beside the lane): their write counters are read only once every one of
// them has flushed (see readCost and closeLanePool).
func newLanePool(ctx context.Context, pool *pgxpool.Pool, schema string, size int32) (*pgxpool.Pool, error) {
	config := pool.Config()
	config.MaxConns = size
	config.MinConns = min(config.MinConns, size)
	config.ConnConfig.RuntimeParams["application_name"] = laneApplicationName(schema)
	lane, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("bench: error opening the lane's pool: %w", err)
	}
	return lane, nil
}

func laneApplicationName(schema string) string { return "outbox bench " + schema }

// closeLanePool closes lane and waits, through pool, until its backends
// have exited. A backend flushes its statistics as it exits, before it
// leaves pg_stat_activity, but after its client has closed the
// connection: a read of the counters as soon as Close returns could miss
// the last of the lane's writes.
func closeLanePool(ctx context.Context, pool, lane *pgxpool.Pool, schema string) error {
	lane.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
			laneApplicationName(schema)).Scan(&n)
		if err != nil {
			return fmt.Errorf("bench: error waiting for the lane's connections to close: %w", err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %d of the lane's connections still open: %w", n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// readCost reads the server's WAL position and the write counters of
// schema's tables.
//
// PostgreSQL 15 keeps a backend's table counters in the backend until it
// flushes them: at the end of a transaction at most once a second, and an
// idle backend within about ten seconds. So before reading, every idle
// connection of pool runs pg_stat_force_next_flush(), which makes that
// backend flush as the statement ends, before it answers. A connection
// busy elsewhere meanwhile would not flush, which is why a lane runs on a
// pool of its own and its end is read only after closeLanePool. Reading
// counters the next moment, in a statement of its own, sees them all
// (stats_fetch_consistency caches a snapshot only within a transaction).
func readCost(ctx context.Context, pool *pgxpool.Pool, schema string) (*costCounters, error) {
	var flushErr error
	for _, c := range pool.AcquireAllIdle(ctx) {
		if flushErr == nil {
			_, flushErr = c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		}
		c.Release()
	}
	if flushErr != nil {
		return nil, fmt.Errorf("bench: error flushing statistics: %w", flushErr)
	}
	c := costCounters{tables: map[string]tableCounters{}}
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&c.walLSN); err != nil {
		return nil, fmt.Errorf("bench: error reading the WAL position: %w", err)
	}
	// A table's index entries: one per index for each insert and each
	// update that was not HOT (see Cost.IndexTuplesPerAction).
	rows, _ := pool.Query(ctx, `SELECT t.relname::text, t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del,
			(t.n_tup_ins + t.n_tup_upd - t.n_tup_hot_upd) * (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid)
		FROM pg_stat_user_tables t WHERE t.schemaname = $1`, schema)
	var (
		name string
		tc   tableCounters
	)
	_, err := pgx.ForEachRow(rows, []any{&name, &tc.inserts, &tc.updates, &tc.hot, &tc.deletes, &tc.indexTuples}, func() error {
		c.tables[name] = tc
		return nil
	})
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
	c := &Cost{WALBytesPerAction: float64(wal) / n, Tables: map[string]*TableCost{}}
	var upd, hot int64
	for name, a := range after.tables {
		b := before.tables[name] // zero for a table made during the lane
		d := tableCounters{a.inserts - b.inserts, a.updates - b.updates, a.hot - b.hot, a.deletes - b.deletes, a.indexTuples - b.indexTuples}
		if d == (tableCounters{}) {
			continue
		}
		t := &TableCost{
			IndexTuplesPerAction: float64(d.indexTuples) / n,
			InsertsPerAction:     float64(d.inserts) / n,
			UpdatesPerAction:     float64(d.updates) / n,
			DeletesPerAction:     float64(d.deletes) / n,
		}
		if d.updates > 0 {
			t.HOTUpdateShare = float64(d.hot) / float64(d.updates)
		}
		c.Tables[name] = t
		c.IndexTuplesPerAction += t.IndexTuplesPerAction
		c.InsertsPerAction += t.InsertsPerAction
		c.UpdatesPerAction += t.UpdatesPerAction
		c.DeletesPerAction += t.DeletesPerAction
		upd, hot = upd+d.updates, hot+d.hot
	}
	if upd > 0 {
		c.HOTUpdateShare = float64(hot) / float64(upd)
	}
	return c, nil
}

package intentdb

import (
	"context"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderUpstreamLock(r func(string) string) {
	// The last started replica's lock is the one in force: it replaces
	// the one recorded, and says which it replaced.
	q.sqlRecordUpstreamLock = r(`WITH prev AS (
			SELECT upstream, lock_sha256 FROM {{schema}}.outbox_upstream_lock WHERE upstream = ANY($1::text[])
		), upd AS (
			INSERT INTO {{schema}}.outbox_upstream_lock AS l (upstream, lock_sha256)
			SELECT * FROM unnest($1::text[], $2::text[])
			ON CONFLICT (upstream) DO UPDATE SET lock_sha256 = excluded.lock_sha256, recorded_at = now()
			RETURNING l.upstream
		)
		SELECT upd.upstream, coalesce(prev.lock_sha256, '') FROM upd LEFT JOIN prev USING (upstream)`)
	q.sqlUpstreamLocks = r(`SELECT upstream, lock_sha256 FROM {{schema}}.outbox_upstream_lock WHERE upstream = ANY($1::text[])`)
}

// RecordUpstreamLocks records, per upstream, the hash of the lock this
// replica runs (locks, upstream to hash), and returns the hashes it
// replaced (upstream to hash, "" where none was recorded).
func (q *Queries) RecordUpstreamLocks(ctx context.Context, db Querier, locks map[string]string) (map[string]string, error) {
	names, sums := make([]string, 0, len(locks)), make([]string, 0, len(locks))
	for name, sum := range locks {
		names, sums = append(names, name), append(sums, sum)
	}
	return q.collectLocks(ctx, db, q.sqlRecordUpstreamLock, names, sums)
}

// UpstreamLocks returns the recorded lock hash of each of upstreams that
// has one.
func (q *Queries) UpstreamLocks(ctx context.Context, db Querier, upstreams []string) (map[string]string, error) {
	return q.collectLocks(ctx, db, q.sqlUpstreamLocks, upstreams)
}

func (q *Queries) collectLocks(ctx context.Context, db Querier, sql string, args ...any) (map[string]string, error) {
	out := map[string]string{}
	var name, sum string
	rows, _ := db.Query(ctx, sql, args...)
	_, err := pgx.ForEachRow(rows, []any{&name, &sum}, func() error {
		out[name] = sum
		return nil
	})
	return out, err
}

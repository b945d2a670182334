package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claimed is an intent as a claim (or, for deduplicated effects, a read)
// returns it: the attempt about to be made.
type claimed struct {
	id int64
	// attempt is this attempt's number, the fencing token.
	attempt int
	// expectState and expectAttempt are what the finish requires the row to
	// still be: running under attempt after a claim; pending under
	// attempt - 1 for a deduplicated effect, which is not claimed.
	expectState   string
	expectAttempt int
	// jobAttempt is the River attempt running this attempt.
	jobAttempt  int
	args        json.RawMessage
	createdAt   time.Time
	effect      string
	maybeSent   bool
	namespace   string
	prevState   string
	providerKey string
}

// claimOutcome is the answer to one claim: either the claimed intent, or why
// nothing was claimed.
type claimOutcome struct {
	claimed *claimed
	// Set when claimed is nil:
	found          bool
	state          string
	leaseExpiresAt *time.Time
}

// finish is one attempt's outcome to record.
type finish struct {
	id            int64
	attempt       int
	expectState   string
	expectAttempt int
	jobAttempt    int
	state         string
	result        json.RawMessage
	err           json.RawMessage
	// maybeSent marks that this attempt may have reached the provider.
	maybeSent bool
	// keepLease keeps a running intent's lease (reconcilable after an
	// ambiguous error: the request may still be in flight at the provider).
	// Without it, a running intent's lease ends now, so the next attempt
	// takes over at once.
	keepLease bool
}

// store holds the state machine's SQL for one schema.
type store struct {
	pool *pgxpool.Pool

	sqlClaim, sqlClaimMissing, sqlFinish, sqlMaybeSent, sqlRead string
}

func newStore(pool *pgxpool.Pool, schema string) *store {
	table := pgx.Identifier{schema, "outbox_intent"}.Sanitize()
	channel := strings.ReplaceAll(schema+".intent_changed", "'", "''")
	return &store{
		pool: pool,
		// The claim locks the claimable rows in id order (so two batches can
		// never deadlock on each other) and reads their state before the
		// update, which tells a first attempt (pending) from a lost outcome
		// (running with an expired lease). Under READ COMMITTED the locking
		// read re-checks its condition on the newest row version, so a row
		// that another claim or finish just changed is judged by its new
		// state.
		sqlClaim: `
			WITH old AS (
				SELECT id, state
				FROM ` + table + `
				WHERE id = ANY($1::bigint[])
				  AND (state = 'pending' OR (state = 'running' AND coalesce(lease_expires_at, '-infinity') <= now()))
				ORDER BY id
				FOR UPDATE
			), upd AS (
				UPDATE ` + table + ` t
				SET state = 'running',
				    attempt = t.attempt + 1,
				    lease_expires_at = now() + $2::interval,
				    maybe_sent = t.maybe_sent OR old.state = 'running',
				    updated_at = now()
				FROM old
				WHERE t.id = old.id
				RETURNING t.id, t.attempt, t.args, t.created_at, t.effect, t.maybe_sent, t.namespace, old.state, t.provider_key
			), notified AS (
				-- One notification per chunk of ids rather than per intent:
				-- listeners wake once per batch, and each payload stays
				-- under Postgres's 8000-byte limit.
				SELECT pg_notify('` + channel + `', 'running ' || string_agg(id::text, ','))
				FROM (SELECT id, (row_number() OVER ()) / 300 AS chunk FROM upd) c
				GROUP BY chunk
			)
			SELECT upd.*, (SELECT count(*) FROM notified) FROM upd`,
		sqlClaimMissing: `SELECT id, state, lease_expires_at FROM ` + table + ` WHERE id = ANY($1::bigint[])`,
		// maybe_sent only ever goes from false to true, so it needs no
		// fencing: a stale attempt that reached the provider may set it.
		sqlMaybeSent: `UPDATE ` + table + ` SET maybe_sent = true WHERE id = $1 AND NOT maybe_sent`,
		// A deduplicated effect's attempt reads the intent without claiming
		// it: the provider dedupes concurrent attempts on the provider key,
		// so the claim's write (and its commit) would buy nothing. Its
		// finish is then fenced on the state and attempt number it read.
		sqlRead: `SELECT id, attempt, args, created_at, effect, maybe_sent, namespace, state, provider_key, lease_expires_at, job_attempt
			FROM ` + table + ` WHERE id = ANY($1::bigint[])`,
		// The finish is fenced: it matches only a row still in the state,
		// and under the attempt number, that its attempt left it in (running
		// after a claim, pending for a deduplicated read).
		sqlFinish: `
			WITH input AS (
				SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::jsonb[], $5::jsonb[], $6::bool[], $7::bool[], $8::text[], $9::int[], $10::int[])
					AS u(id, attempt, state, result, error, maybe_sent, keep_lease, expect_state, expect_attempt, job_attempt)
			), upd AS (
				UPDATE ` + table + ` t
				SET state = u.state,
				    attempt = u.attempt,
				    job_attempt = u.job_attempt,
				    result = coalesce(u.result, t.result),
				    error = u.error,
				    maybe_sent = t.maybe_sent OR u.maybe_sent,
				    lease_expires_at = CASE
				        WHEN u.state <> 'running' THEN NULL
				        WHEN u.keep_lease THEN t.lease_expires_at
				        ELSE now() END,
				    completed_at = CASE WHEN u.state IN ('succeeded', 'failed', 'unknown', 'cancelled') THEN now() END,
				    updated_at = now()
				FROM input u
				WHERE t.id = u.id AND t.state = u.expect_state AND t.attempt = u.expect_attempt
				RETURNING t.id, t.state, u.attempt
			), notified AS (
				SELECT pg_notify('` + channel + `', state || ' ' || string_agg(id::text, ','))
				FROM (SELECT id, state, (row_number() OVER (PARTITION BY state)) / 300 AS chunk FROM upd) c
				GROUP BY state, chunk
			)
			SELECT upd.id, upd.attempt, (SELECT count(*) FROM notified) FROM upd`,
	}
}

type claimReq struct {
	id    int64
	lease time.Duration
}

// claimBatch claims a batch of intents in one statement. Leases within one
// batch are the same (one effect timeout per process), so the first is used.
func (s *store) claimBatch(ctx context.Context, reqs []claimReq) ([]claimOutcome, error) {
	ids := make([]int64, len(reqs))
	for i, r := range reqs {
		ids[i] = r.id
	}
	rows, err := s.pool.Query(ctx, s.sqlClaim, ids, reqs[0].lease)
	if err != nil {
		return nil, fmt.Errorf("error claiming intents: %w", err)
	}
	byID := make(map[int64]*claimed, len(reqs))
	for rows.Next() {
		var c claimed
		var n int64
		if err := rows.Scan(&c.id, &c.attempt, &c.args, &c.createdAt, &c.effect, &c.maybeSent, &c.namespace, &c.prevState, &c.providerKey, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("error claiming intents: %w", err)
		}
		c.expectState, c.expectAttempt = "running", c.attempt
		byID[c.id] = &c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error claiming intents: %w", err)
	}

	outs := make([]claimOutcome, len(reqs))
	var missing []int64
	for i, r := range reqs {
		if c, ok := byID[r.id]; ok {
			outs[i].claimed = c
			delete(byID, r.id) // the same id twice in a batch claims once
		} else {
			missing = append(missing, r.id)
		}
	}
	if len(missing) == 0 {
		return outs, nil
	}

	// Rare: terminal intents (a re-run job) or live leases (a job rescued
	// while its first worker still runs). Say which, so the worker can
	// finish or snooze.
	rows, err = s.pool.Query(ctx, s.sqlClaimMissing, missing)
	if err != nil {
		return nil, fmt.Errorf("error reading unclaimed intents: %w", err)
	}
	type info struct {
		state string
		lease *time.Time
	}
	infos := map[int64]info{}
	for rows.Next() {
		var id int64
		var in info
		if err := rows.Scan(&id, &in.state, &in.lease); err != nil {
			rows.Close()
			return nil, fmt.Errorf("error reading unclaimed intents: %w", err)
		}
		infos[id] = in
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading unclaimed intents: %w", err)
	}
	for i, r := range reqs {
		if outs[i].claimed != nil {
			continue
		}
		if in, ok := infos[r.id]; ok {
			outs[i] = claimOutcome{found: true, state: in.state, leaseExpiresAt: in.lease}
		}
	}
	return outs, nil
}

// finishBatch records a batch of outcomes in one statement, and reports for
// each whether the fenced write matched (false: a stale attempt).
func (s *store) finishBatch(ctx context.Context, fs []finish) ([]bool, error) {
	var (
		ids       = make([]int64, len(fs))
		attempts  = make([]int32, len(fs))
		states    = make([]string, len(fs))
		results   = make([]*string, len(fs))
		errs      = make([]*string, len(fs))
		maybeSent = make([]bool, len(fs))
		keepLease = make([]bool, len(fs))
		expStates = make([]string, len(fs))
		expAtts   = make([]int32, len(fs))
		jobAtts   = make([]int32, len(fs))
	)
	for i, f := range fs {
		ids[i], attempts[i], states[i], maybeSent[i], keepLease[i] = f.id, int32(f.attempt), f.state, f.maybeSent, f.keepLease
		expStates[i], expAtts[i], jobAtts[i] = f.expectState, int32(f.expectAttempt), int32(f.jobAttempt)
		if f.result != nil {
			s := string(f.result)
			results[i] = &s
		}
		if f.err != nil {
			s := string(f.err)
			errs[i] = &s
		}
	}
	rows, err := s.pool.Query(ctx, s.sqlFinish, ids, attempts, states, results, errs, maybeSent, keepLease, expStates, expAtts, jobAtts)
	if err != nil {
		return nil, fmt.Errorf("error recording outcomes: %w", err)
	}
	type idAttempt struct {
		id      int64
		attempt int32
	}
	applied := make(map[idAttempt]bool, len(fs))
	for rows.Next() {
		var k idAttempt
		var n int64
		if err := rows.Scan(&k.id, &k.attempt, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("error recording outcomes: %w", err)
		}
		applied[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error recording outcomes: %w", err)
	}
	outs := make([]bool, len(fs))
	for i, f := range fs {
		outs[i] = applied[idAttempt{f.id, int32(f.attempt)}]
	}
	return outs, nil
}

// read is an intent as a deduplicated effect's attempt reads it.
type read struct {
	claimed
	found          bool
	state          string
	leaseExpiresAt *time.Time
	jobAttempt     int
}

// readBatch reads a batch of intents in one statement.
func (s *store) readBatch(ctx context.Context, ids []int64) ([]read, error) {
	rows, err := s.pool.Query(ctx, s.sqlRead, ids)
	if err != nil {
		return nil, fmt.Errorf("error reading intents: %w", err)
	}
	byID := make(map[int64]read, len(ids))
	for rows.Next() {
		var r read
		if err := rows.Scan(&r.id, &r.attempt, &r.args, &r.createdAt, &r.effect, &r.maybeSent, &r.namespace,
			&r.state, &r.providerKey, &r.leaseExpiresAt, &r.jobAttempt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("error reading intents: %w", err)
		}
		r.found = true
		byID[r.id] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading intents: %w", err)
	}
	outs := make([]read, len(ids))
	for i, id := range ids {
		outs[i] = byID[id]
	}
	return outs, nil
}

// markMaybeSent records that an attempt may have reached the provider, for an
// attempt whose fenced finish was rejected.
func (s *store) markMaybeSent(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, s.sqlMaybeSent, id); err != nil {
		return fmt.Errorf("error recording a stale attempt: %w", err)
	}
	return nil
}

package intentdb

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderAttempt(r func(string) string) {
	// The claim locks the claimable rows in id order (so two batches can
	// never deadlock on each other) and reads their state before the
	// update, which tells a first attempt (pending) from a lost outcome
	// (running with an expired lease). Under READ COMMITTED the locking read
	// re-checks its condition on the newest row version, so a row that
	// another claim or finish just changed is judged by its new state.
	q.sqlClaim = r(`
		WITH old AS (
			SELECT id, state, declaration_sha256, updated_at, lease_expires_at
			FROM {{schema}}.outbox_intent
			WHERE id = ANY($1::bigint[])
			  AND (state = 'pending' OR (state = 'running' AND coalesce(lease_expires_at, '-infinity') <= now()))
			ORDER BY id
			FOR UPDATE
		), upd AS (
			UPDATE {{schema}}.outbox_intent t
			SET state = 'running',
			    attempt = t.attempt + 1,
			    lease_expires_at = now() + $2::interval,
			    maybe_sent = t.maybe_sent OR old.state = 'running',
			    -- The declaration this attempt sends under, recorded before
			    -- the call; the one before is returned for the comparison.
			    declaration_sha256 = coalesce(nullif(d.decl, ''), t.declaration_sha256),
			    updated_at = now()
			FROM old JOIN unnest($1::bigint[], $3::text[]) AS d(id, decl) ON d.id = old.id
			WHERE t.id = old.id
			RETURNING t.id, t.attempt, t.args, t.created_at, t.effect, t.maybe_sent, t.namespace, old.state, t.provider_key,
			          extract(epoch FROM now() - t.created_at)::float8 AS age, coalesce(old.declaration_sha256, ''),
			          coalesce(t.traceparent, ''),
			          -- When the attempt before ended: its finish (the row's
			          -- last change), or its lease's end when its outcome was
			          -- lost.
			          coalesce(extract(epoch FROM now() - greatest(old.updated_at, old.lease_expires_at))::float8, 0) AS since_last_end
		), notified AS (
			-- One notification per chunk of ids rather than per intent:
			-- listeners wake once per batch.
			SELECT pg_notify('{{channel_changed}}', 'running ' || string_agg(id::text, ','))
			FROM (SELECT id, (row_number() OVER ()) / {{chunk}} AS chunk FROM upd) c
			GROUP BY chunk
		)
		SELECT upd.*, (SELECT count(*) FROM notified) FROM upd`)
	q.sqlStates = r(`SELECT id, state, lease_expires_at FROM {{schema}}.outbox_intent WHERE id = ANY($1::bigint[])`)
	// maybe_sent only ever goes from false to true, so it needs no fencing:
	// a stale attempt that reached the provider may set it.
	q.sqlMaybeSent = r(`UPDATE {{schema}}.outbox_intent SET maybe_sent = true WHERE id = $1 AND NOT maybe_sent`)
	// A deduplicated effect's attempt reads the intent without claiming it:
	// the provider dedupes concurrent attempts on the provider key, so the
	// claim's write (and its commit) would buy nothing. Its finish is then
	// fenced on the state and attempt number it read.
	q.sqlRead = r(`SELECT ` + readColumns + ` FROM {{schema}}.outbox_intent WHERE id = ANY($1::bigint[])`)
	// The finish is fenced: it matches only a row still in the state, and
	// under the attempt number, that its attempt left it in (running after a
	// claim, pending for a deduplicated read).
	q.sqlFinish = r(`
		WITH input AS (
			SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::jsonb[], $5::jsonb[], $6::bool[], $7::bool[], $8::text[], $9::int[], $10::int[], $11::bigint[], $12::text[])
				AS u(id, attempt, state, result, error, maybe_sent, keep_lease, expect_state, expect_attempt, job_attempt, expect_job, decl)
		), upd AS (
			UPDATE {{schema}}.outbox_intent t
			SET state = u.state,
			    attempt = u.attempt,
			    job_attempt = u.job_attempt,
			    result = coalesce(u.result, t.result),
			    error = u.error,
			    maybe_sent = t.maybe_sent OR u.maybe_sent,
			    declaration_sha256 = coalesce(nullif(u.decl, ''), t.declaration_sha256),
			    lease_expires_at = CASE
			        WHEN u.state <> 'running' THEN NULL
			        WHEN u.keep_lease THEN t.lease_expires_at
			        ELSE now() END,
			    completed_at = CASE WHEN u.state IN ('succeeded', 'failed', 'unknown', 'cancelled') THEN now() END,
			    updated_at = now(),
			    -- A provider that stopped the work at an operator's cancel
			    -- (cancel_requested): the cancel is recorded as anyone's.
			    resolved_by = CASE WHEN u.state = 'cancelled' AND t.cancel_requested IS NOT NULL THEN t.cancel_requested->>'by' ELSE t.resolved_by END,
			    resolution_note = CASE WHEN u.state = 'cancelled' AND t.cancel_requested IS NOT NULL THEN t.cancel_requested->>'note' ELSE t.resolution_note END,
			    resolved_at = CASE WHEN u.state = 'cancelled' AND t.cancel_requested IS NOT NULL THEN now() ELSE t.resolved_at END
			FROM input u
			WHERE t.id = u.id AND t.state = u.expect_state AND t.attempt = u.expect_attempt
			  AND (u.expect_job = 0 OR t.job_id = u.expect_job)
			RETURNING t.id, t.state, u.attempt
		), notified AS (
			SELECT pg_notify('{{channel_changed}}', state || ' ' || string_agg(id::text, ','))
			FROM (SELECT id, state, (row_number() OVER (PARTITION BY state)) / {{chunk}} AS chunk FROM upd) c
			GROUP BY state, chunk
		)
		SELECT upd.id, upd.attempt, (SELECT count(*) FROM notified) FROM upd`)
}

// AttemptRow is an intent as an attempt sees it once claimed (or, for a
// deduplicated effect, read).
type AttemptRow struct {
	ID int64
	// Attempt is the intent's attempt number: after a claim, this attempt's
	// own (the fencing token); after a read, the last one recorded.
	Attempt   int
	Args      json.RawMessage
	CreatedAt time.Time
	// Age is the intent's age on the database's clock, the one that wrote
	// created_at: windows are never judged by a clock that disagrees.
	Age         time.Duration
	Effect      string
	MaybeSent   bool
	Namespace   string
	ProviderKey string
	// State is the intent's state before the claim (pending, or running for
	// a lost outcome), or its state as read.
	State string
	// JobAttempt is the last River attempt that recorded an outcome (read
	// only).
	JobAttempt int
	// LeaseExpiresAt is the lease of a running intent (read only).
	LeaseExpiresAt *time.Time
	// DeclarationSHA256 is the declaration the last attempt was sent under
	// (a declared effect's), before this claim; empty when none was
	// recorded.
	DeclarationSHA256 string
	// SinceLastEnd is how long before the claim, on the database's clock,
	// the attempt before it ended: its finish, or its lease's end when its
	// outcome was lost (for a first attempt, the row's last change). A
	// look-up's settle counts from it: a send ends by then. Claim only.
	SinceLastEnd time.Duration
	// Traceparent is the W3C traceparent of the span the intent was
	// enqueued in, for the attempt's span to link to; empty when none was
	// recorded.
	Traceparent string
}

// Claim claims the claimable intents among ids (pending, or running with an
// expired lease) in one statement: a new attempt number, state running, a
// lease of lease from the database's clock. It returns the claimed ones by
// id; an id absent from the map was not claimable. decls, aligned with ids,
// are the declarations the attempts send under ("" for a built-in effect),
// recorded by the claim.
func (q *Queries) Claim(ctx context.Context, db Querier, ids []int64, lease time.Duration, decls []string) (map[int64]*AttemptRow, error) {
	rows, _ := db.Query(ctx, q.sqlClaim, ids, lease, decls)
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*AttemptRow, error) {
		var a AttemptRow
		var age, sinceLastEnd float64
		var notified int64
		err := row.Scan(&a.ID, &a.Attempt, &a.Args, &a.CreatedAt, &a.Effect, &a.MaybeSent, &a.Namespace, &a.State, &a.ProviderKey, &age, &a.DeclarationSHA256, &a.Traceparent,
			&sinceLastEnd, &notified)
		a.Age, a.SinceLastEnd = seconds(age), seconds(sinceLastEnd)
		return &a, err
	})
	return byID(claimed), err
}

// seconds is a duration read as seconds from the database.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// byID indexes attempt rows by intent id.
func byID(rows []*AttemptRow) map[int64]*AttemptRow {
	out := make(map[int64]*AttemptRow, len(rows))
	for _, a := range rows {
		out[a.ID] = a
	}
	return out
}

// Status is an intent's state and lease.
type Status struct {
	State          string
	LeaseExpiresAt *time.Time
}

// Statuses reads the state and lease of each of ids that exists.
func (q *Queries) Statuses(ctx context.Context, db Querier, ids []int64) (map[int64]Status, error) {
	out := make(map[int64]Status, len(ids))
	var id int64
	var st Status
	rows, _ := db.Query(ctx, q.sqlStates, ids)
	_, err := pgx.ForEachRow(rows, []any{&id, &st.State, &st.LeaseExpiresAt}, func() error {
		out[id] = st
		return nil
	})
	return out, err
}

// readColumns are what a read of an intent for an attempt selects, in the
// order scanRead scans them.
const readColumns = `id, attempt, args, created_at, effect, maybe_sent, namespace, state, provider_key, lease_expires_at, job_attempt,
	extract(epoch FROM now() - created_at)::float8, coalesce(declaration_sha256, ''), coalesce(traceparent, '')`

// scanRead scans a row of readColumns.
func scanRead(row pgx.CollectableRow) (*AttemptRow, error) {
	var a AttemptRow
	var age float64
	err := row.Scan(&a.ID, &a.Attempt, &a.Args, &a.CreatedAt, &a.Effect, &a.MaybeSent, &a.Namespace,
		&a.State, &a.ProviderKey, &a.LeaseExpiresAt, &a.JobAttempt, &age, &a.DeclarationSHA256, &a.Traceparent)
	a.Age = seconds(age)
	return &a, err
}

// Read reads each of ids that exists, without claiming it.
func (q *Queries) Read(ctx context.Context, db Querier, ids []int64) (map[int64]*AttemptRow, error) {
	rows, _ := db.Query(ctx, q.sqlRead, ids)
	read, err := pgx.CollectRows(rows, scanRead)
	return byID(read), err
}

// Finish is one attempt's outcome to record.
type Finish struct {
	ID int64
	// Attempt is the attempt number to record.
	Attempt int
	// ExpectState and ExpectAttempt fence the write: it applies only to a
	// row still in that state under that attempt number.
	ExpectState   string
	ExpectAttempt int
	// JobAttempt is the River attempt that ran this attempt.
	JobAttempt int
	// ExpectJobID, when not 0, fences the write on the intent's job too: a
	// batch's attempt must not write over an intent handed over to a job
	// of its own (its job_attempt is that job's).
	ExpectJobID int64
	// State is the new state.
	State string
	// Result is the provider's answer (kept when nil).
	Result json.RawMessage
	// Err is the error to record (cleared when nil); see ErrorJSON.
	Err json.RawMessage
	// MaybeSent marks that this attempt may have reached the provider.
	MaybeSent bool
	// KeepLease keeps a running intent's lease (a request that may still be
	// in flight). Without it, a running intent's lease ends now, so the next
	// attempt takes over at once.
	KeepLease bool
	// DeclarationSHA256 is the declaration the attempt was sent under (a
	// declared effect's); empty keeps the one recorded.
	DeclarationSHA256 string
}

// Applied identifies a finish that matched its fence.
type Applied struct {
	ID      int64
	Attempt int
}

// Finish records a batch of outcomes in one statement, and returns those
// whose fenced write matched; the others were stale.
func (q *Queries) Finish(ctx context.Context, db Querier, fs []Finish) (map[Applied]bool, error) {
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
		expJobs   = make([]int64, len(fs))
		decls     = make([]string, len(fs))
	)
	for i, f := range fs {
		ids[i], attempts[i], states[i], maybeSent[i], keepLease[i] = f.ID, int32(f.Attempt), f.State, f.MaybeSent, f.KeepLease
		expStates[i], expAtts[i], jobAtts[i], expJobs[i] = f.ExpectState, int32(f.ExpectAttempt), int32(f.JobAttempt), f.ExpectJobID
		decls[i] = f.DeclarationSHA256
		if f.Result != nil {
			s := string(f.Result)
			results[i] = &s
		}
		if f.Err != nil {
			s := string(f.Err)
			errs[i] = &s
		}
	}
	applied := make(map[Applied]bool, len(fs))
	var a Applied
	var notified int64
	rows, _ := db.Query(ctx, q.sqlFinish, ids, attempts, states, results, errs, maybeSent, keepLease, expStates, expAtts, jobAtts, expJobs, decls)
	_, err := pgx.ForEachRow(rows, []any{&a.ID, &a.Attempt, &notified}, func() error {
		applied[a] = true
		return nil
	})
	return applied, err
}

// MarkMaybeSent records that an attempt may have reached the provider, for
// an attempt whose fenced finish was rejected.
func (q *Queries) MarkMaybeSent(ctx context.Context, db DBTX, id int64) error {
	_, err := db.Exec(ctx, q.sqlMaybeSent, id)
	return err
}

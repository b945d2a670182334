package intentdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func (q *Queries) renderClient(r func(string) string) {
	// The enqueue is one statement. Its usual case, a new key or a key
	// recorded long ago, is this plain statement. It does what the SQL
	// function outbox_enqueue_try does, without a plpgsql call (a third of
	// the cost of an enqueue). It returns no row in one race only: a
	// concurrent enqueue of the same key committed while the INSERT waited
	// for it, after this statement's snapshot was taken, so the SELECT
	// cannot see that row. Enqueue then calls outbox_enqueue_try
	// (sqlEnqueueRetry), whose statements take fresh snapshots.
	//
	// The provider key is set by the table's insert trigger, from the new
	// row's id; another applies the approval rules (outbox_approval_rule)
	// to the effects they name (migrations/007_cheaper_insert.up.sql).
	//
	// The notification wakes the dispatcher's drain; like the function, a
	// session notifies at most once per NotifyWindow, because a notifying
	// commit holds a database-wide lock until it is durable.
	q.sqlEnqueue = r(`WITH ins AS (
			INSERT INTO {{schema}}.outbox_intent (namespace, key, effect, args, requested_by, key_source, state, enqueued_by, traceparent)
			VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::boolean THEN 'awaiting_approval' ELSE 'pending' END, $8, $9)
			ON CONFLICT (namespace, key) DO NOTHING
			RETURNING {{columns}}
		), notified AS (
			SELECT pg_notify('{{channel_pending}}', ''),
			       set_config('{{guc_notified}}', clock_timestamp()::text, false)
			FROM ins
			WHERE coalesce(nullif(current_setting('{{guc_notified}}', true), ''), '-infinity')::timestamptz
			      <= clock_timestamp() - interval '{{notify_window}}'
		)
		SELECT {{columns}}, false, false FROM ins, (SELECT count(*) FROM notified) n
		UNION ALL
		SELECT {{columns}}, true, NOT (effect = $3 AND args = $4::jsonb) FROM {{schema}}.outbox_intent
		WHERE namespace = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM ins)`)
	// The SQL functions (the fallbacks of Enqueue and EnqueueMany) take no
	// enqueued_by or traceparent: they are set on the rows they inserted by
	// the next statement, in the same transaction when there is one
	// (setOrigin).
	q.sqlEnqueueRetry = r(`SELECT ` + columns("(r.intent).") + `, r.duplicate, r.conflict
		FROM {{schema}}.outbox_enqueue_try($1, $2, $3, $4, $5, $6, $7) r`)
	q.sqlEnqueueMany = r(`SELECT ` + columns("(r.intent).") + `, r.duplicate, r.conflict, r.ord
		FROM {{schema}}.outbox_enqueue_many($1, $2, $3, $4, $5, $6, $7) r`)
	// The batch's usual case, in a caller's transaction: every key new.
	// One set-based INSERT without ON CONFLICT (whose speculative
	// insertion costs a tenth of the statement) and without looking any
	// key up; it answers only what the insert did not already know: a
	// fresh row's other columns are their defaults (scanNewRow). A key
	// recorded before, or by a concurrent transaction, raises a unique
	// violation, and EnqueueMany takes the next statement. A key repeated
	// within the batch is inserted once (its first occurrence); the others
	// answer as duplicates of it, or conflicts.
	q.sqlEnqueueManyNew = r(`WITH input AS (
			SELECT u.*, row_number() OVER w AS rn, first_value(u.effect) OVER w AS first_effect, first_value(u.args) OVER w AS first_args
			FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::boolean[], $8::text[], $9::text[])
				WITH ORDINALITY AS u(namespace, key, effect, args, requested_by, key_source, require_approval, enqueued_by, traceparent, ord)
			WINDOW w AS (PARTITION BY u.namespace, u.key ORDER BY u.ord)
		), ins AS (
			INSERT INTO {{schema}}.outbox_intent (namespace, key, effect, args, requested_by, key_source, state, enqueued_by, traceparent)
			SELECT namespace, key, effect, args, requested_by, key_source,
			       CASE WHEN require_approval THEN 'awaiting_approval' ELSE 'pending' END, enqueued_by, traceparent
			FROM input WHERE rn = 1 ORDER BY ord
			RETURNING ` + strings.Join(newColumns, ", ") + `
		), notified AS (` + batchNotified + `)
		SELECT ` + columnsOf("ins.", newColumns) + `, input.rn > 1,
		       NOT (input.effect = input.first_effect AND input.args = input.first_args), input.ord - 1
		FROM input JOIN ins ON ins.namespace = input.namespace AND ins.key = input.key,
		     (SELECT count(*) FROM notified) n`)
	// When a key was recorded before: one set-based INSERT ... ON
	// CONFLICT, four times faster than outbox_enqueue_many's statement per
	// row. A key repeated within the batch is inserted once (its first
	// occurrence); the others answer as duplicates of it, or conflicts.
	// EnqueueMany runs it in a savepoint and falls back to
	// outbox_enqueue_many when any key conflicts or lost a race (no
	// answer), so that a conflict still writes nothing.
	q.sqlEnqueueManyFast = r(`WITH input AS (
			SELECT u.*, row_number() OVER (PARTITION BY u.namespace, u.key ORDER BY u.ord) AS rn
			FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::boolean[], $8::text[], $9::text[])
				WITH ORDINALITY AS u(namespace, key, effect, args, requested_by, key_source, require_approval, enqueued_by, traceparent, ord)
		), ins AS (
			INSERT INTO {{schema}}.outbox_intent (namespace, key, effect, args, requested_by, key_source, state, enqueued_by, traceparent)
			SELECT namespace, key, effect, args, requested_by, key_source,
			       CASE WHEN require_approval THEN 'awaiting_approval' ELSE 'pending' END, enqueued_by, traceparent
			FROM input WHERE rn = 1 ORDER BY ord
			ON CONFLICT (namespace, key) DO NOTHING
			RETURNING {{columns}}
		), notified AS (` + batchNotified + `)
		SELECT ` + columns("t.") + `, t.duplicate, t.conflict, t.ord - 1 FROM (
			SELECT ` + columns("ins.") + `, input.rn > 1 AS duplicate,
			       NOT (ins.effect = input.effect AND ins.args = input.args) AS conflict, input.ord
			FROM input JOIN ins ON ins.namespace = input.namespace AND ins.key = input.key
			UNION ALL
			SELECT ` + columns("i.") + `, true, NOT (i.effect = input.effect AND i.args = input.args), input.ord
			FROM input JOIN {{schema}}.outbox_intent i ON i.namespace = input.namespace AND i.key = input.key
			WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.namespace = input.namespace AND ins.key = input.key)
		) t, (SELECT count(*) FROM notified) n`)
	// The reads of whole intents also name the kind of the intent's River
	// job, so that an operator can tell a batch from a job of its own
	// (Row.JobKind): one look-up by primary key per intent.
	q.sqlGet = r(`SELECT {{columns}}, ` + jobKind + ` FROM {{schema}}.outbox_intent i WHERE namespace = $1 AND key = $2`)
	// No index holds the state (so that the intent's updates are HOT:
	// migration 015), so a list by state reads the namespace's rows newest
	// first, except for the rare states, found where only they are: the
	// unknown intents in their table, the intents that awaited approval by
	// the index of approval_rule (set on insert only).
	list := func(only string) string {
		return r(`SELECT {{columns}}, ` + jobKind + ` FROM {{schema}}.outbox_intent i
		WHERE ` + only + `namespace = $1
		  AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
		  AND ($3::text = '' OR effect = $3::text)
		  AND ($4::bigint = 0 OR id < $4::bigint)
		ORDER BY id DESC
		LIMIT $5`)
	}
	q.sqlList = list("")
	q.sqlListUnknown = list(`i.id IN (SELECT id FROM {{schema}}.outbox_intent_unknown) AND `)
	q.sqlListAwaiting = list(`i.approval_rule IS NOT NULL AND `)
	// Cancelling is allowed only while no attempt may have started: the
	// intent is pending (or awaiting approval, which has no job), no attempt that ran may have reached the provider
	// (maybe_sent), and its River job has not started an attempt that did
	// not record an outcome. A deduplicated effect is not claimed before its
	// call, so an attempt in flight, or one that died mid-call and whose job
	// was rescued, shows only in its job: running, or an attempt counter
	// past the last attempt the intent recorded (job_attempt) — the rule the
	// worker itself uses to detect a lost attempt. The job row is locked
	// first (River fetches with SKIP LOCKED, so it cannot start an attempt
	// meanwhile) and read in its newest committed state; after the cancel
	// commits, an attempt that starts finds the intent cancelled and does
	// nothing.
	//
	// The UPDATE also requires job_id to be the one the job check read: a
	// drain that dispatched the intent while the UPDATE waited on its row
	// lock has made a job this statement never checked, so it refuses.
	q.sqlCancel = r(`WITH cur AS (
			SELECT job_id, job_attempt FROM {{schema}}.outbox_intent WHERE namespace = $1 AND key = $2
		), job AS (
			SELECT j.state, j.attempt FROM {{schema}}.river_job j
			WHERE j.id = (SELECT job_id FROM cur)
			FOR UPDATE
		), upd AS (
			UPDATE {{schema}}.outbox_intent
			SET state = 'cancelled', completed_at = now(), updated_at = now(),
			    resolved_by = $3, resolution_note = NULLIF($4, ''), resolved_at = now()
			WHERE namespace = $1 AND key = $2 AND state IN ('pending', 'awaiting_approval') AND NOT maybe_sent
			  AND job_id IS NOT DISTINCT FROM (SELECT job_id FROM cur)
			  AND NOT EXISTS (SELECT 1 FROM job WHERE job.state = 'running' OR job.attempt > (SELECT job_attempt FROM cur))
			RETURNING {{columns}}
		), notified AS (
			SELECT pg_notify('{{channel_changed}}', 'cancelled ' || id::text) FROM upd
		)
		SELECT {{columns}} FROM upd, (SELECT count(*) FROM notified) n`)
	// What the SQL functions take none of, set by setOrigin on the rows
	// they inserted (never on a duplicate's, the first enqueue's); a value
	// a row already holds is kept.
	q.sqlSetOrigin = r(`UPDATE {{schema}}.outbox_intent i
		SET enqueued_by = coalesce(i.enqueued_by, u.enqueued_by), traceparent = coalesce(i.traceparent, u.traceparent)
		FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(id, enqueued_by, traceparent)
		WHERE i.id = u.id`)
	// Resolving moves an unknown intent on. "retry" sends it again knowingly:
	// back to pending with no job, so the dispatcher gives it a fresh River
	// job, and maybe_sent cleared, because the operator has taken that risk
	// (otherwise a deduplicated intent past its window would turn unknown
	// again at once). The attempt number is kept: it is the fencing token and
	// must only grow.
	q.sqlResolve = r(`WITH upd AS (
			UPDATE {{schema}}.outbox_intent
			SET state = $3,
			    result = CASE WHEN $3 = 'succeeded' THEN jsonb_build_object('resolved_by', 'operator', 'note', $4::text) ELSE result END,
			    error = CASE WHEN $3 = 'failed' THEN jsonb_build_object('code', 'resolved_failed', 'message', $4::text)
			                 WHEN $3 = 'pending' THEN NULL ELSE error END,
			    completed_at = CASE WHEN $3 = 'pending' THEN NULL ELSE now() END,
			    job_id = CASE WHEN $3 = 'pending' THEN NULL ELSE job_id END,
			    job_attempt = CASE WHEN $3 = 'pending' THEN 0 ELSE job_attempt END,
			    maybe_sent = CASE WHEN $3 = 'pending' THEN false ELSE maybe_sent END,
			    lease_expires_at = NULL,
			    updated_at = now(),
			    resolved_by = $5, resolution_note = NULLIF($4, ''), resolved_at = now()
			WHERE namespace = $1 AND key = $2 AND state = 'unknown'
			RETURNING {{columns}}
		), notified AS (
			SELECT pg_notify('{{channel_changed}}', state || ' ' || id::text) FROM upd
		), pending AS (
			SELECT pg_notify('{{channel_pending}}', '') FROM upd WHERE state = 'pending'
		)
		SELECT {{columns}} FROM upd, (SELECT count(*) FROM notified) n, (SELECT count(*) FROM pending) p`)
}

// EnqueueRow is one intent to enqueue, checked by the caller.
type EnqueueRow struct {
	Args        []byte
	Effect      string
	Key         string
	KeySource   string
	Namespace   string
	RequestedBy *string
	// EnqueuedBy is the audit actor who enqueued, from the credentials
	// (package access); nil for none.
	EnqueuedBy *string
	// Traceparent is the W3C traceparent of the span the enqueue ran in,
	// for the attempts' spans to link to; nil for none. A duplicate keeps
	// the first enqueue's.
	Traceparent *string
	// RequireApproval records the intent as awaiting_approval whatever the
	// rules say.
	RequireApproval bool
}

// EnqueueResult is what an enqueue found or wrote.
type EnqueueResult struct {
	// Row is the new intent, or the one first recorded under the key.
	Row *Row
	// Duplicate is true when the key was recorded before.
	Duplicate bool
	// Conflict is true when it was recorded for another action (another
	// effect, or args that differ as jsonb).
	Conflict bool
}

// Enqueue records one intent with a single statement on db (the caller's
// transaction), or finds the one first recorded under its key.
func (q *Queries) Enqueue(ctx context.Context, db Querier, e *EnqueueRow) (*EnqueueResult, error) {
	res := &EnqueueResult{}
	args := []any{e.Namespace, e.Key, e.Effect, string(e.Args), e.RequestedBy, e.KeySource, e.RequireApproval, e.EnqueuedBy, e.Traceparent}
	row, err := scanRow(db.QueryRow(ctx, q.sqlEnqueue, args...), &res.Duplicate, &res.Conflict)
	if errors.Is(err, pgx.ErrNoRows) {
		// Lost the race described at sqlEnqueue: nothing was written.
		row, err = scanRow(db.QueryRow(ctx, q.sqlEnqueueRetry, args[:7]...), &res.Duplicate, &res.Conflict)
		if err == nil {
			res.Row = row
			err = q.setOrigin(ctx, db, []*EnqueueRow{e}, []*EnqueueResult{res})
		}
	}
	if err != nil {
		return nil, err
	}
	res.Row = row
	return res, nil
}

// EnqueueMany records many intents on db atomically, or finds those first
// recorded under their keys. The results are in the order of es. When any
// key conflicts, nothing is written; the conflicting results say so.
//
// In a transaction (a pgx.Tx) it is a set-based statement in a savepoint:
// a plain INSERT when every key is new, else one with ON CONFLICT.
// Elsewhere, or when that statement meets a conflict or a race, it is
// outbox_enqueue_many's, whose exception block is a subtransaction and
// whose statements take fresh snapshots (docs/design.md, section 1).
func (q *Queries) EnqueueMany(ctx context.Context, db Querier, es []*EnqueueRow) ([]*EnqueueResult, error) {
	params := manyParams(es)
	if tx, ok := db.(pgx.Tx); ok {
		results, err := q.tryMany(ctx, tx, q.sqlEnqueueManyNew, scanNewRow, len(es), params)
		if results != nil || err != nil {
			return results, err
		}
		results, err = q.tryMany(ctx, tx, q.sqlEnqueueManyFast, scanRow, len(es), params)
		if results != nil || err != nil {
			return results, err
		}
	}
	results, err := collectMany(db.Query(ctx, q.sqlEnqueueMany, params[:7]...))(len(es), scanRow)
	if err != nil {
		return nil, err
	}
	if err := q.setOrigin(ctx, db, es, results); err != nil {
		return nil, err
	}
	return results, nil
}

// setOrigin records es' EnqueuedBy and Traceparent on the rows that the SQL
// functions, which take neither, inserted for them (results), and
// EnqueuedBy on the results' rows. A duplicate's row is the first
// enqueue's, whose origin stays as it was recorded. Outside a transaction
// the rows are visible without them for the moment between the two
// statements; these are the fallback paths (a lost race, a conflict in a
// batch, a batch outside a transaction).
func (q *Queries) setOrigin(ctx context.Context, db Querier, es []*EnqueueRow, results []*EnqueueResult) error {
	var ids []int64
	var bys, traceparents []*string
	for i, res := range results {
		e := es[i]
		if res == nil || res.Row == nil || res.Duplicate || res.Conflict || (e.EnqueuedBy == nil && e.Traceparent == nil) {
			continue
		}
		ids, bys, traceparents = append(ids, res.Row.ID), append(bys, e.EnqueuedBy), append(traceparents, e.Traceparent)
		if res.Row.EnqueuedBy == nil {
			res.Row.EnqueuedBy = e.EnqueuedBy
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := db.Query(ctx, q.sqlSetOrigin, ids, bys, traceparents)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// BatchSender sends a pipeline of statements: a pool or a connection.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// EnqueueGroup records the intents of independent callers with one
// statement on db, in a transaction of its own, answering each as if it had
// been enqueued alone, in the order of es: a key new or repeated within es
// is inserted once (its first occurrence), the rest answered as its
// duplicates or conflicts; a key recorded before is answered as Enqueue
// answers it. A position without an answer (its key was being recorded by
// a transaction that committed meanwhile) is nil, for the caller to enqueue
// alone.
//
// The statement waits at most lockWait for any one lock (a transaction
// holding one of its keys uncommitted, or updating a row of a key recorded
// before); past that it fails, SQLSTATE 55P03, having written nothing, so
// that one transaction cannot hold up a group of others. The limit is set
// for the statement alone, in the same round trip, and the session's own
// is back in force before the commit (whose notification lock may well be
// waited for longer). A lockWait of 0 leaves the session's lock_timeout.
func (q *Queries) EnqueueGroup(ctx context.Context, db BatchSender, es []*EnqueueRow, lockWait time.Duration) ([]*EnqueueResult, error) {
	// One pipeline, one implicit transaction: settings made local to it
	// end with it.
	b := &pgx.Batch{}
	if lockWait > 0 {
		b.Queue(`SELECT set_config('outbox.lock_timeout', current_setting('lock_timeout'), true)`)
		b.Queue(`SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(max(1, lockWait.Milliseconds()), 10)+"ms")
	}
	if len(es) == 1 {
		e := es[0]
		b.Queue(q.sqlEnqueue, e.Namespace, e.Key, e.Effect, string(e.Args), e.RequestedBy, e.KeySource, e.RequireApproval, e.EnqueuedBy, e.Traceparent)
	} else {
		b.Queue(q.sqlEnqueueManyFast, manyParams(es)...)
	}
	if lockWait > 0 {
		b.Queue(`SELECT set_config('lock_timeout', current_setting('outbox.lock_timeout'), true)`)
	}
	br := db.SendBatch(ctx, b)
	results, err := func() ([]*EnqueueResult, error) {
		if lockWait > 0 {
			for range 2 {
				if _, err := br.Exec(); err != nil {
					return nil, err
				}
			}
		}
		var results []*EnqueueResult
		if len(es) > 1 {
			var err error
			if results, err = collectMany(br.Query())(len(es), scanRow); err != nil {
				return nil, err
			}
		} else {
			res := &EnqueueResult{}
			row, err := scanRow(br.QueryRow(), &res.Duplicate, &res.Conflict)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				res = nil // lost the race of sqlEnqueue: nothing was written
			case err != nil:
				return nil, err
			default:
				res.Row = row
			}
			results = []*EnqueueResult{res}
		}
		if lockWait > 0 {
			if _, err := br.Exec(); err != nil {
				return nil, err
			}
		}
		return results, nil
	}()
	// Close reads to the end of the pipeline, which commits it.
	if cerr := br.Close(); err == nil && cerr != nil {
		return nil, cerr
	}
	return results, err
}

// manyParams are the batch statements' arguments: one array per column.
func manyParams(es []*EnqueueRow) []any {
	var (
		namespaces   = make([]string, len(es))
		keys         = make([]string, len(es))
		effectNames  = make([]string, len(es))
		args         = make([]string, len(es))
		requestedBys = make([]*string, len(es))
		keySources   = make([]string, len(es))
		approvals    = make([]bool, len(es))
		enqueuedBys  = make([]*string, len(es))
		traceparents = make([]*string, len(es))
	)
	for i, e := range es {
		namespaces[i], keys[i], effectNames[i], args[i], requestedBys[i], keySources[i], approvals[i], enqueuedBys[i], traceparents[i] =
			e.Namespace, e.Key, e.Effect, string(e.Args), e.RequestedBy, e.KeySource, e.RequireApproval, e.EnqueuedBy, e.Traceparent
	}
	// enqueuedBys and traceparents last: the SQL function
	// outbox_enqueue_many takes the first seven.
	return []any{namespaces, keys, effectNames, args, requestedBys, keySources, approvals, enqueuedBys, traceparents}
}

// tryMany runs one of the batch's set-based statements (sql, its answers
// read by scan) in a savepoint of tx. It returns nil results, and the
// savepoint rolled back, when the batch must take the next statement: an
// answer shows a conflict, a position got no answer, or, for
// sqlEnqueueManyNew (without ON CONFLICT), a key was already recorded.
func (q *Queries) tryMany(ctx context.Context, tx pgx.Tx, sql string, scan func(pgx.Row, ...any) (*Row, error), n int, params []any) ([]*EnqueueResult, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	results, err := collectMany(sp.Query(ctx, sql, params...))(n, scan)
	if err != nil {
		_ = sp.Rollback(ctx)
		var pgErr *pgconn.PgError
		if sql == q.sqlEnqueueManyNew && errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
			return nil, nil
		}
		return nil, err
	}
	for _, res := range results {
		if res == nil || res.Conflict {
			return nil, sp.Rollback(ctx)
		}
	}
	return results, sp.Commit(ctx)
}

// collectMany reads a batch's answers, "columns, duplicate, conflict, ord"
// (ord 0-based; the columns as scan reads them), into results by position.
// A position without an answer is nil.
func collectMany(rows pgx.Rows, err error) func(n int, scan func(pgx.Row, ...any) (*Row, error)) ([]*EnqueueResult, error) {
	return func(n int, scan func(pgx.Row, ...any) (*Row, error)) ([]*EnqueueResult, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		results := make([]*EnqueueResult, n)
		for rows.Next() {
			res := &EnqueueResult{}
			var ord int
			if res.Row, err = scan(rows, &res.Duplicate, &res.Conflict, &ord); err != nil {
				return nil, err
			}
			if ord < 0 || ord >= n {
				return nil, fmt.Errorf("enqueue returned position %d for %d intents", ord, n)
			}
			results[ord] = res
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return results, nil
	}
}

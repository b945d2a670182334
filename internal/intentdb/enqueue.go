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

// renderClient renders the write side's statements. Each is in a file of
// sql/ named after it, with why it is written so.
func (q *Queries) renderClient(r func(string) string) {
	q.sqlEnqueue = r(statement("enqueue"))
	q.sqlEnqueueRetry = r(statement("enqueue_retry"))
	q.sqlEnqueueMany = r(statement("enqueue_many"))
	q.sqlEnqueueManyNew = r(statement("enqueue_many_new"))
	q.sqlEnqueueManyFast = r(statement("enqueue_many_fast"))
	q.sqlGet = r(statement("get"))
	q.sqlGetWhole = r(`SELECT {{columns}}, {{job_kind}} FROM {{schema}}.outbox_intent i WHERE id = $1 AND namespace = $2`)
	list := func(only string) string {
		return r(strings.ReplaceAll(statement("list"), "{{only}}", only))
	}
	q.sqlList = list("")
	q.sqlListUnknown = list(`i.id IN (SELECT id FROM {{schema}}.outbox_intent_unknown) AND `)
	q.sqlListAwaiting = list(`i.approval_rule IS NOT NULL AND `)
	q.sqlCancel = r(statement("cancel"))
	q.sqlSetOrigin = r(statement("set_origin"))
	q.sqlResolve = r(statement("resolve"))
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

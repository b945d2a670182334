package intentdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// ChangeApproved is the state word of an approval's notification on
// ChannelChanged: the intent is then pending, but a waiter must tell an
// approval from any other return to pending.
const ChangeApproved = "approved"

func (q *Queries) renderApproval(r func(string) string) {
	// Approve and Deny lock the row first (GetForUpdate) and check the
	// arguments' hash in Go, in the same transaction: the hash is over the
	// arguments' canonical form (RFC 8785), which only Go computes.
	q.sqlGetByID = r(`SELECT {{columns}} FROM {{schema}}.outbox_intent WHERE id = $1`)
	q.sqlGetForUpdate = r(`SELECT {{columns}} FROM {{schema}}.outbox_intent WHERE namespace = $1 AND key = $2 FOR UPDATE`)
	// Approved: pending with no job, so the drain (woken on the pending
	// channel) gives it one like any new intent.
	q.sqlApprove = r(`WITH upd AS (
			UPDATE {{schema}}.outbox_intent
			SET state = 'pending', approved_by = $2, approved_at = now(), approval_note = NULLIF($3, ''), updated_at = now()
			WHERE id = $1 AND state = 'awaiting_approval'
			RETURNING {{columns}}
		), notified AS (
			SELECT pg_notify('{{channel_changed}}', '` + ChangeApproved + ` ' || id::text), pg_notify('{{channel_pending}}', '') FROM upd
		)
		SELECT {{columns}} FROM upd, (SELECT count(*) FROM notified) n`)
	q.sqlDeny = r(`WITH upd AS (
			UPDATE {{schema}}.outbox_intent
			SET state = 'cancelled', error = jsonb_build_object('code', 'approval_denied', 'message', $3::text),
			    denied_by = $2, denied_at = now(), approval_note = NULLIF($3, ''), completed_at = now(), updated_at = now()
			WHERE id = $1 AND state = 'awaiting_approval'
			RETURNING {{columns}}
		), notified AS (
			SELECT pg_notify('{{channel_changed}}', 'cancelled ' || id::text) FROM upd
		)
		SELECT {{columns}} FROM upd, (SELECT count(*) FROM notified) n`)
	// SKIP LOCKED: an intent an operator is approving right now is left to
	// that decision.
	q.sqlExpire = r(`WITH upd AS (
			UPDATE {{schema}}.outbox_intent t
			SET state = 'cancelled',
			    error = jsonb_build_object('code', 'approval_expired', 'message', 'not approved within ' || $1::text),
			    completed_at = now(), updated_at = now()
			WHERE t.id IN (
				SELECT id FROM {{schema}}.outbox_intent
				-- approval_rule: through the small index of the intents
				-- that awaited approval (an intent awaits approval only
				-- from its insert, which sets it).
				WHERE approval_rule IS NOT NULL AND state = 'awaiting_approval' AND created_at < now() - $2::interval
				ORDER BY created_at
				LIMIT $3
				FOR UPDATE SKIP LOCKED)
			RETURNING t.id
		), notified AS (
			SELECT pg_notify('{{channel_changed}}', 'cancelled ' || string_agg(id::text, ','))
			FROM (SELECT id, (row_number() OVER ()) / {{chunk}} AS chunk FROM upd) c
			GROUP BY chunk
		)
		SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM notified)`)
	q.sqlUnannounced = r(`SELECT {{columns}} FROM {{schema}}.outbox_intent
		WHERE approval_rule IS NOT NULL AND state = 'awaiting_approval' AND approval_notified_at IS NULL
		ORDER BY created_at
		LIMIT $1
		FOR UPDATE SKIP LOCKED`)
	q.sqlAnnounced = r(`UPDATE {{schema}}.outbox_intent SET approval_notified_at = now() WHERE id = ANY($1::bigint[])`)
	q.sqlRulesDelete = r(`DELETE FROM {{schema}}.outbox_approval_rule`)
	q.sqlRulesInsert = r(`INSERT INTO {{schema}}.outbox_approval_rule (position, rule, effect, arg, op, value, num)
		VALUES ($1, $2, $3, NULLIF($4, ''), NULLIF($5, ''), NULLIF($6, ''), $7::numeric)`)
	q.sqlRules = r(`SELECT rule FROM {{schema}}.outbox_approval_rule ORDER BY position`)
	q.sqlRulesLock = r(`LOCK TABLE {{schema}}.outbox_approval_rule IN EXCLUSIVE MODE`)
}

// GetByID returns the intent id, or pgx.ErrNoRows.
func (q *Queries) GetByID(ctx context.Context, db Querier, id int64) (*Row, error) {
	return scanRow(db.QueryRow(ctx, q.sqlGetByID, id))
}

// GetForUpdate returns the intent (namespace, key) locked for the rest of
// tx, or pgx.ErrNoRows.
func (q *Queries) GetForUpdate(ctx context.Context, tx Querier, namespace, key string) (*Row, error) {
	return scanRow(tx.QueryRow(ctx, q.sqlGetForUpdate, namespace, key))
}

// Approve moves the awaiting intent id to pending, recording who approved
// it, and returns it; pgx.ErrNoRows when it no longer awaits approval.
func (q *Queries) Approve(ctx context.Context, tx Querier, id int64, by, note string) (*Row, error) {
	return scanRow(tx.QueryRow(ctx, q.sqlApprove, id, by, note))
}

// Deny moves the awaiting intent id to cancelled with error approval_denied,
// recording who denied it, and returns it; pgx.ErrNoRows when it no longer
// awaits approval.
func (q *Queries) Deny(ctx context.Context, tx Querier, id int64, by, note string) (*Row, error) {
	return scanRow(tx.QueryRow(ctx, q.sqlDeny, id, by, note))
}

// ExpireApprovals cancels, with error approval_expired, at most limit
// intents that have awaited approval for longer than ttl, and returns how
// many.
func (q *Queries) ExpireApprovals(ctx context.Context, db Querier, ttl time.Duration, limit int) (int64, error) {
	var n, notified int64
	err := db.QueryRow(ctx, q.sqlExpire, ttl.String(), ttl, limit).Scan(&n, &notified)
	return n, err
}

// SelectUnannounced locks up to limit awaiting intents whose approval has
// not been announced yet, skipping those another announcer holds.
func (q *Queries) SelectUnannounced(ctx context.Context, tx Querier, limit int) ([]*Row, error) {
	rows, _ := tx.Query(ctx, q.sqlUnannounced, limit)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Row, error) { return scanRow(row) })
}

// MarkAnnounced records that the intents ids were announced.
func (q *Queries) MarkAnnounced(ctx context.Context, tx DBTX, ids []int64) error {
	_, err := tx.Exec(ctx, q.sqlAnnounced, ids)
	return err
}

// ApprovalRule is one rule as stored: Arg, Op and Value are empty for a rule
// on a whole effect; Num is Value when it is a JSON number.
type ApprovalRule struct {
	Rule   string
	Effect string
	Arg    string
	Op     string
	Value  string
	Num    *string
}

// LockApprovalRules locks the rules against another writer (not readers)
// until tx ends.
func (q *Queries) LockApprovalRules(ctx context.Context, tx DBTX) error {
	_, err := tx.Exec(ctx, q.sqlRulesLock)
	return err
}

// SetApprovalRules replaces the rules in force with rules, in tx.
func (q *Queries) SetApprovalRules(ctx context.Context, tx DBTX, rules []ApprovalRule) error {
	if _, err := tx.Exec(ctx, q.sqlRulesDelete); err != nil {
		return err
	}
	for i, r := range rules {
		if _, err := tx.Exec(ctx, q.sqlRulesInsert, i+1, r.Rule, r.Effect, r.Arg, r.Op, r.Value, r.Num); err != nil {
			return err
		}
	}
	return nil
}

// ApprovalRules returns the rules in force, as written, in order.
func (q *Queries) ApprovalRules(ctx context.Context, db Querier) ([]string, error) {
	rows, _ := db.Query(ctx, q.sqlRules)
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

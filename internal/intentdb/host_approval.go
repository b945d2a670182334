package intentdb

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderHostApproval(r func(string) string) {
	q.sqlStateKey = r(`SELECT key FROM {{schema}}.outbox_state_key WHERE id = 1`)
	// Only an intent that its caller's own request holds, and that no rule
	// holds, becomes one the host may decide: a rule's brake is the
	// operators' unless the rule itself says [host].
	q.sqlRequestedHost = r(`UPDATE {{schema}}.outbox_intent SET approval_rule = 'requested[host]'
		WHERE id = $1 AND state = 'awaiting_approval' AND approval_rule = 'requested'
		RETURNING {{columns}}`)
	// The state's id is its primary key: a second use, on any replica,
	// inserts nothing. Rows a day past their expiry go with each use, a
	// few at a time, so the table holds only states still replayable.
	q.sqlUseState = r(`WITH pruned AS (
			DELETE FROM {{schema}}.outbox_mcp_state_used WHERE state_id IN (
				SELECT state_id FROM {{schema}}.outbox_mcp_state_used
				WHERE expires_at < now() - interval '1 day' LIMIT 10)
		)
		INSERT INTO {{schema}}.outbox_mcp_state_used (state_id, intent_id, action, expires_at)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (state_id) DO NOTHING
		RETURNING true`)
	q.sqlStatesUsed = r(`SELECT count(*) FROM {{schema}}.outbox_mcp_state_used WHERE intent_id = $1`)
}

// StateKey returns the key generated at migrate that derives MCP task ids
// and seals requestState (docs/agents.md). Only the schema's owner may
// read it.
func (q *Queries) StateKey(ctx context.Context, db Querier) ([]byte, error) {
	var key []byte
	err := db.QueryRow(ctx, q.sqlStateKey).Scan(&key)
	return key, err
}

// SetRequestedHost lets the person at the MCP host decide the intent id,
// which its caller's own request holds for approval; pgx.ErrNoRows when it
// no longer awaits approval or a rule holds it.
func (q *Queries) SetRequestedHost(ctx context.Context, db Querier, id int64) (*Row, error) {
	return scanRow(db.QueryRow(ctx, q.sqlRequestedHost, id))
}

// UseState records that the approval request stateID of intent id was
// answered (action: the answer), and reports false when it had been
// already: a state is used once.
func (q *Queries) UseState(ctx context.Context, tx Querier, stateID []byte, id int64, action string, expires time.Time) (bool, error) {
	var used bool
	err := tx.QueryRow(ctx, q.sqlUseState, stateID, id, action, expires).Scan(&used)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return used, err
}

// StatesUsed returns how many approval requests of intent id were answered
// from the host: the next request's id derives from it, so that a request
// answered (declined) is never asked again under the same id.
func (q *Queries) StatesUsed(ctx context.Context, db Querier, id int64) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, q.sqlStatesUsed, id).Scan(&n)
	return n, err
}

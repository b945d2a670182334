package intentdb

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderSentArgs(r func(string) string) {
	// Fenced like a checkpoint: only the attempt that holds the intent's
	// claim records what it sends, so a stale attempt cannot overwrite
	// what the attempt in force sent.
	q.sqlSetSentArgs = r(`UPDATE {{schema}}.outbox_intent
		SET sent_args = jsonb_build_object('attempt', $2::int, 'arguments', $3::jsonb)
		WHERE id = $1 AND attempt = $2 AND state = 'running'`)
	q.sqlSentArgs = r(`SELECT sent_args FROM {{schema}}.outbox_intent WHERE id = $1`)
}

// ErrSentArgsFenced is SetSentArgs' error when the attempt no longer holds
// the intent (another attempt took it over, or it ended): it must not send.
var ErrSentArgsFenced = errors.New("intentdb: the attempt no longer holds the intent; what it would send was not recorded")

// SentArgs is what an attempt sent a provider, as recorded on its intent.
type SentArgs struct {
	// Attempt is the attempt that sent them.
	Attempt int `json:"attempt"`
	// Arguments are the arguments as sent, scrubbed of secrets.
	Arguments json.RawMessage `json:"arguments"`
}

// SetSentArgs records args as what attempt of intent id sends, before it
// sends them; the attempt must hold the intent's claim
// (ErrSentArgsFenced otherwise).
func (q *Queries) SetSentArgs(ctx context.Context, db DBTX, id int64, attempt int, args json.RawMessage) error {
	tag, err := db.Exec(ctx, q.sqlSetSentArgs, id, attempt, []byte(args))
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrSentArgsFenced
	}
	return nil
}

// SentArgsOf returns what the last attempt of intent id that recorded its
// arguments sent, nil when none did (an effect that sends the intent's
// args as they are, or no attempt yet).
func (q *Queries) SentArgsOf(ctx context.Context, db Querier, id int64) (*SentArgs, error) {
	var raw []byte
	err := db.QueryRow(ctx, q.sqlSentArgs, id).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && raw == nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out SentArgs
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

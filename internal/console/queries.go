package console

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/outbox"
)

// queries are the console's reads. They read the tables directly because
// the console needs what outbox.Client's reads do not offer (every
// namespace at once for the River UI user, key prefixes, creation times,
// counts, River's jobs); every change goes through outbox.Client instead.
type queries struct {
	pool    *pgxpool.Pool
	intent  string // the quoted intent table
	job     string // the quoted River job table
	unknown string // the quoted table of the unknown intents' ids
}

func newQueries(pool *pgxpool.Pool, schema string) *queries {
	return &queries{
		pool:    pool,
		intent:  pgx.Identifier{schema, "outbox_intent"}.Sanitize(),
		job:     pgx.Identifier{schema, "river_job"}.Sanitize(),
		unknown: pgx.Identifier{schema, "outbox_intent_unknown"}.Sanitize(),
	}
}

// row is an intent as the lists show it.
type row struct {
	ID           int64
	Namespace    string
	Key          string
	Effect       string
	State        outbox.State
	Attempts     int
	Args         json.RawMessage
	Error        *outbox.IntentError
	MaybeSent    bool
	ProviderKey  string
	ApprovalRule *string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

const rowColumns = `id, namespace, key, effect, state, attempt, args, error, maybe_sent, provider_key, approval_rule, created_at, updated_at`

func scanRows(rows pgx.Rows) ([]*row, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*row, error) {
		var x row
		var state string
		err := r.Scan(&x.ID, &x.Namespace, &x.Key, &x.Effect, &state, &x.Attempts, &x.Args, &x.Error, &x.MaybeSent,
			&x.ProviderKey, &x.ApprovalRule, &x.CreatedAt, &x.UpdatedAt)
		x.State = outbox.State(state)
		return &x, err
	})
}

// filter is the intents list's filter. Namespace "" is every namespace the
// principal sees.
type filter struct {
	Namespace     string
	States        []string
	Effect        string
	KeyPrefix     string
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
}

// where is filter's condition, its arguments numbered from $1.
func (f *filter) where() (string, []any) {
	states := f.States
	if states == nil {
		states = []string{}
	}
	return `($1::text = '' OR namespace = $1::text)
		AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
		AND ($3::text = '' OR effect = $3::text)
		AND ($4::text = '' OR starts_with(key, $4::text))
		AND ($5::timestamptz IS NULL OR created_at >= $5::timestamptz)
		AND ($6::timestamptz IS NULL OR created_at < $6::timestamptz)`,
		[]any{f.Namespace, states, f.Effect, f.KeyPrefix, f.CreatedAfter, f.CreatedBefore}
}

// list returns up to limit intents matching f with an id below before (0:
// from the newest), newest first.
func (q *queries) list(ctx context.Context, f *filter, before int64, limit int) ([]*row, error) {
	where, args := f.where()
	rows, err := q.pool.Query(ctx, `SELECT `+rowColumns+` FROM `+q.intent+` WHERE `+where+`
		AND ($7::bigint = 0 OR id < $7::bigint) ORDER BY id DESC LIMIT $8`, append(args, before, limit)...)
	if err != nil {
		return nil, fmt.Errorf("error listing intents: %w", err)
	}
	return scanRows(rows)
}

// pendingMatching returns up to limit pending intents matching f, oldest
// first: a bulk cancel's selection.
func (q *queries) pendingMatching(ctx context.Context, f *filter, limit int) ([]*row, error) {
	g := *f
	g.States = []string{string(outbox.StatePending)}
	where, args := g.where()
	rows, err := q.pool.Query(ctx, `SELECT `+rowColumns+` FROM `+q.intent+` WHERE `+where+` ORDER BY id LIMIT $7`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("error selecting pending intents: %w", err)
	}
	return scanRows(rows)
}

// inState returns up to limit intents of namespace ("" for all) in state,
// oldest first: the unknown queue and the approvals.
func (q *queries) inState(ctx context.Context, namespace string, state outbox.State, limit int) ([]*row, error) {
	// Found where only the rare states are (no index holds the state:
	// migration 015): the unknown intents' table, the approval_rule index.
	only := ""
	switch state {
	case outbox.StateUnknown:
		only = `id IN (SELECT id FROM ` + q.unknown + `) AND `
	case outbox.StateAwaitingApproval:
		only = `approval_rule IS NOT NULL AND `
	}
	rows, err := q.pool.Query(ctx, `SELECT `+rowColumns+` FROM `+q.intent+`
		WHERE `+only+`($1::text = '' OR namespace = $1::text) AND state = $2 ORDER BY id LIMIT $3`, namespace, string(state), limit)
	if err != nil {
		return nil, fmt.Errorf("error listing %s intents: %w", state, err)
	}
	return scanRows(rows)
}

// overview is the overview's numbers.
type overview struct {
	// ByEffect counts intents by effect, then state.
	ByEffect map[string]map[string]int64
	// ByState counts intents by state.
	ByState map[string]int64
	// OldestPending is the age of the oldest pending intent; nil when none
	// is pending.
	OldestPending *time.Duration
	// LastHour is what the intents table tells of the last hour.
	LastHour lastHour
}

// lastHour is what the intents table tells of the last hour. The table
// keeps each intent's latest state and attempt count, not each attempt,
// so attempts are counted by the intents they touched.
type lastHour struct {
	Created   int64
	Attempted int64
	Succeeded int64
	Failed    int64
	Unknown   int64
	Cancelled int64
}

func (q *queries) overview(ctx context.Context, namespace string) (*overview, error) {
	o := &overview{ByEffect: map[string]map[string]int64{}, ByState: map[string]int64{}}
	rows, err := q.pool.Query(ctx, `SELECT effect, state, count(*) FROM `+q.intent+`
		WHERE ($1::text = '' OR namespace = $1::text) GROUP BY effect, state`, namespace)
	if err != nil {
		return nil, fmt.Errorf("error counting intents: %w", err)
	}
	var effect, state string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&effect, &state, &n}, func() error {
		if o.ByEffect[effect] == nil {
			o.ByEffect[effect] = map[string]int64{}
		}
		o.ByEffect[effect][state] += n
		o.ByState[state] += n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error counting intents: %w", err)
	}
	var oldest *float64
	h := &o.LastHour
	err = q.pool.QueryRow(ctx, `SELECT
			(SELECT extract(epoch FROM now() - min(created_at))::float8 FROM `+q.intent+`
			 WHERE state = 'pending' AND ($1::text = '' OR namespace = $1::text)),
			count(*) FILTER (WHERE created_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE attempt > 0 AND updated_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE state = 'succeeded' AND completed_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE state = 'failed' AND completed_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE state = 'unknown' AND completed_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE state = 'cancelled' AND completed_at > now() - interval '1 hour')
		FROM `+q.intent+`
		WHERE ($1::text = '' OR namespace = $1::text)
		  AND (updated_at > now() - interval '1 hour' OR created_at > now() - interval '1 hour')`, namespace).
		Scan(&oldest, &h.Created, &h.Attempted, &h.Succeeded, &h.Failed, &h.Unknown, &h.Cancelled)
	if err != nil {
		return nil, fmt.Errorf("error reading the last hour: %w", err)
	}
	if oldest != nil {
		d := time.Duration(*oldest * float64(time.Second))
		o.OldestPending = &d
	}
	return o, nil
}

// job is one of an intent's River jobs.
type job struct {
	ID          int64
	Kind        string
	State       string
	Attempt     int
	MaxAttempts int
	CreatedAt   time.Time
	AttemptedAt *time.Time
	FinalizedAt *time.Time
	Errors      []jobError
	Output      json.RawMessage
}

// jobError is one entry of a River job's errors: an attempt that returned
// an error to River.
type jobError struct {
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
}

// jobs returns the River jobs that ran, or run, the intent's attempts: its
// current job, any job of its own, and the batches that held it. River's
// GIN index on args finds them; River deletes finished jobs after a day by
// default, so an older intent may show none.
func (q *queries) jobs(ctx context.Context, intentID int64, jobID *int64) ([]*job, error) {
	var current int64
	if jobID != nil {
		current = *jobID
	}
	rows, err := q.pool.Query(ctx, `SELECT id, kind, state, attempt, max_attempts, created_at, attempted_at, finalized_at,
			coalesce(to_jsonb(errors), '[]'::jsonb), metadata->'output'
		FROM `+q.job+`
		WHERE id = $2
		   OR (kind = 'outbox_intent' AND args @> jsonb_build_object('intent_id', $1::bigint))
		   OR (kind = 'outbox_intent_batch' AND args @> jsonb_build_object('intent_ids', jsonb_build_array($1::bigint)))
		ORDER BY id`, intentID, current)
	if err != nil {
		return nil, fmt.Errorf("error reading River jobs: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*job, error) {
		var j job
		var errs json.RawMessage
		if err := r.Scan(&j.ID, &j.Kind, &j.State, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.AttemptedAt, &j.FinalizedAt, &errs, &j.Output); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(errs, &j.Errors); err != nil {
			return nil, fmt.Errorf("error reading job %d's errors: %w", j.ID, err)
		}
		j.Output = batchOutput(j.Output, intentID)
		return &j, nil
	})
}

// batchOutput picks, out of a batch's output, the entry of the intent; a
// job of the intent's own has its output as is.
func batchOutput(out json.RawMessage, intentID int64) json.RawMessage {
	var batch struct {
		Intents []json.RawMessage `json:"intents"`
	}
	if len(out) == 0 || json.Unmarshal(out, &batch) != nil || batch.Intents == nil {
		return out
	}
	for _, entry := range batch.Intents {
		var e struct {
			IntentID int64 `json:"intent_id"`
		}
		if json.Unmarshal(entry, &e) == nil && e.IntentID == intentID {
			return entry
		}
	}
	return nil
}

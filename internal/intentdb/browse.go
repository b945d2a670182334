package intentdb

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The operator console's reads: what the client's reads do not offer (every
// namespace at once for the River UI user, key prefixes, creation times,
// counts, River's jobs).

// summaryColumns lists the columns scanSummary reads, in its order: what an
// intents list shows.
var summaryColumns = []string{
	"id", "namespace", "key", "effect", "state", "attempt", "args", "error", "maybe_sent",
	"provider_key", "approval_rule", "created_at", "updated_at",
}

// filterWhere is Filter's condition, its arguments numbered from $1 (see
// Filter.args).
const filterWhere = `($1::text = '' OR namespace = $1::text)
		AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
		AND ($3::text = '' OR effect = $3::text)
		AND ($4::text = '' OR starts_with(key, $4::text))
		AND ($5::timestamptz IS NULL OR created_at >= $5::timestamptz)
		AND ($6::timestamptz IS NULL OR created_at < $6::timestamptz)`

func (q *Queries) renderBrowse(r func(string) string) {
	summary := columnsOf("", summaryColumns)
	q.sqlBrowse = r(`SELECT ` + summary + ` FROM {{schema}}.outbox_intent WHERE ` + filterWhere + `
		AND ($7::bigint = 0 OR id < $7::bigint) ORDER BY id DESC LIMIT $8`)
	q.sqlBrowseOldest = r(`SELECT ` + summary + ` FROM {{schema}}.outbox_intent WHERE ` + filterWhere + ` ORDER BY id LIMIT $7`)
	// Found where only the rare states are (no index holds the state:
	// migration 015): the unknown intents' table, the approval_rule index.
	inState := func(only string) string {
		return r(`SELECT ` + summary + ` FROM {{schema}}.outbox_intent
		WHERE ` + only + `($1::text = '' OR namespace = $1::text) AND state = $2 ORDER BY id LIMIT $3`)
	}
	q.sqlInState = inState("")
	q.sqlInStateUnknown = inState(`id IN (SELECT id FROM {{schema}}.outbox_intent_unknown) AND `)
	q.sqlInStateAwaiting = inState(`approval_rule IS NOT NULL AND `)
	q.sqlOverviewCounts = r(`SELECT effect, state, count(*) FROM {{schema}}.outbox_intent
		WHERE ($1::text = '' OR namespace = $1::text) GROUP BY effect, state`)
	q.sqlOverviewLastHour = r(`SELECT
			(SELECT extract(epoch FROM now() - min(created_at))::float8 FROM {{schema}}.outbox_intent
			 WHERE state = 'pending' AND ($1::text = '' OR namespace = $1::text)),
			count(*) FILTER (WHERE created_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE attempt > 0 AND updated_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE state = 'succeeded' AND completed_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE state = 'failed' AND completed_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE state = 'unknown' AND completed_at > now() - interval '1 hour'),
			count(*) FILTER (WHERE state = 'cancelled' AND completed_at > now() - interval '1 hour')
		FROM {{schema}}.outbox_intent
		WHERE ($1::text = '' OR namespace = $1::text)
		  AND (updated_at > now() - interval '1 hour' OR created_at > now() - interval '1 hour')`)
	// River's GIN index on args finds an intent's jobs.
	q.sqlJobs = r(`SELECT id, kind, state, attempt, max_attempts, created_at, attempted_at, finalized_at,
			coalesce(to_jsonb(errors), '[]'::jsonb), metadata->'output'
		FROM {{schema}}.river_job
		WHERE id = $2
		   OR (kind = 'outbox_intent' AND args @> jsonb_build_object('intent_id', $1::bigint))
		   OR (kind = 'outbox_intent_batch' AND args @> jsonb_build_object('intent_ids', jsonb_build_array($1::bigint)))
		ORDER BY id`)
}

// Filter is the console's filter on intents. Zero values do not filter;
// Namespace "" is every namespace.
type Filter struct {
	Namespace     string
	States        []string
	Effect        string
	KeyPrefix     string
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
}

// args returns the arguments of filterWhere.
func (f *Filter) args() []any {
	states := f.States
	if states == nil {
		states = []string{}
	}
	return []any{f.Namespace, states, f.Effect, f.KeyPrefix, f.CreatedAfter, f.CreatedBefore}
}

// scanSummaries reads rows of summaryColumns into Rows whose other fields
// are left zero.
func scanSummaries(rows pgx.Rows, err error) ([]*Row, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Row, error) {
		var r Row
		err := row.Scan(&r.ID, &r.Namespace, &r.Key, &r.Effect, &r.State, &r.Attempt, &r.Args, &r.Error, &r.MaybeSent,
			&r.ProviderKey, &r.ApprovalRule, &r.CreatedAt, &r.UpdatedAt)
		return &r, err
	})
}

// Browse returns up to limit intents matching f with an id below beforeID
// (0: from the newest), newest first. Each Row holds what a list shows (id,
// namespace, key, effect, state, attempt, args, error, maybe_sent,
// provider_key, approval_rule, created_at, updated_at) and leaves the other
// fields zero.
func (q *Queries) Browse(ctx context.Context, db Querier, f *Filter, beforeID int64, limit int) ([]*Row, error) {
	rows, err := db.Query(ctx, q.sqlBrowse, append(f.args(), beforeID, limit)...)
	return scanSummaries(rows, err)
}

// BrowseOldest returns up to limit intents matching f, oldest first, as
// Browse reads them.
func (q *Queries) BrowseOldest(ctx context.Context, db Querier, f *Filter, limit int) ([]*Row, error) {
	rows, err := db.Query(ctx, q.sqlBrowseOldest, append(f.args(), limit)...)
	return scanSummaries(rows, err)
}

// InState returns up to limit intents of namespace ("" for all) in state,
// oldest first, as Browse reads them.
func (q *Queries) InState(ctx context.Context, db Querier, namespace, state string, limit int) ([]*Row, error) {
	sql := q.sqlInState
	switch state {
	case "unknown":
		sql = q.sqlInStateUnknown
	case "awaiting_approval":
		sql = q.sqlInStateAwaiting
	}
	rows, err := db.Query(ctx, sql, namespace, state, limit)
	return scanSummaries(rows, err)
}

// Overview is the console overview's numbers.
type Overview struct {
	// ByEffect counts intents by effect, then state.
	ByEffect map[string]map[string]int64
	// ByState counts intents by state.
	ByState map[string]int64
	// OldestPending is the age of the oldest pending intent; nil when none
	// is pending.
	OldestPending *time.Duration
	// LastHour is what the intents table tells of the last hour.
	LastHour LastHour
}

// LastHour is what the intents table tells of the last hour. The table
// keeps each intent's latest state and attempt count, not each attempt,
// so attempts are counted by the intents they touched.
type LastHour struct {
	Created   int64
	Attempted int64
	Succeeded int64
	Failed    int64
	Unknown   int64
	Cancelled int64
}

// Overview reads the overview of namespace ("" for all).
func (q *Queries) Overview(ctx context.Context, db Querier, namespace string) (*Overview, error) {
	o := &Overview{ByEffect: map[string]map[string]int64{}, ByState: map[string]int64{}}
	rows, err := db.Query(ctx, q.sqlOverviewCounts, namespace)
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
	err = db.QueryRow(ctx, q.sqlOverviewLastHour, namespace).
		Scan(&oldest, &h.Created, &h.Attempted, &h.Succeeded, &h.Failed, &h.Unknown, &h.Cancelled)
	if err != nil {
		return nil, fmt.Errorf("error reading the last hour: %w", err)
	}
	if oldest != nil {
		d := seconds(*oldest)
		o.OldestPending = &d
	}
	return o, nil
}

// Job is one of an intent's River jobs.
type Job struct {
	ID          int64
	Kind        string
	State       string
	Attempt     int
	MaxAttempts int
	CreatedAt   time.Time
	AttemptedAt *time.Time
	FinalizedAt *time.Time
	Errors      []JobError
	// Output is the job's output as River stores it: a batch's holds an
	// entry per intent.
	Output json.RawMessage
}

// JobError is one entry of a River job's errors: an attempt that returned
// an error to River.
type JobError struct {
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
}

// Jobs returns the River jobs that ran, or run, the intent's attempts, by
// id: jobID (its current job, when not nil), any job of its own, and the
// batches that held it. River deletes finished jobs after a day by default,
// so an older intent may have none.
func (q *Queries) Jobs(ctx context.Context, db Querier, intentID int64, jobID *int64) ([]*Job, error) {
	var current int64
	if jobID != nil {
		current = *jobID
	}
	rows, err := db.Query(ctx, q.sqlJobs, intentID, current)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Job, error) {
		var j Job
		var errs json.RawMessage
		if err := r.Scan(&j.ID, &j.Kind, &j.State, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.AttemptedAt, &j.FinalizedAt, &errs, &j.Output); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(errs, &j.Errors); err != nil {
			return nil, fmt.Errorf("error reading job %d's errors: %w", j.ID, err)
		}
		return &j, nil
	})
}

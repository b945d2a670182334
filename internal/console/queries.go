package console

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
)

// queries are the console's reads, in package intentdb with the table's
// other statements. The console needs what outbox.Client's reads do not
// offer (every namespace at once for the River UI user, key prefixes,
// creation times, counts, River's jobs); every change goes through
// outbox.Client instead.
type queries struct {
	pool    *pgxpool.Pool
	queries *intentdb.Queries
}

func newQueries(pool *pgxpool.Pool, schema string) *queries {
	return &queries{pool: pool, queries: intentdb.New(schema)}
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

func rowsOf(in []*intentdb.Row) []*row {
	out := make([]*row, len(in))
	for i, r := range in {
		out[i] = &row{
			ID: r.ID, Namespace: r.Namespace, Key: r.Key, Effect: r.Effect, State: outbox.State(r.State),
			Attempts: r.Attempt, Args: r.Args, MaybeSent: r.MaybeSent, ProviderKey: r.ProviderKey,
			ApprovalRule: r.ApprovalRule, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		}
		if r.Error != nil {
			out[i].Error = &outbox.IntentError{Code: r.Error.Code, Message: r.Error.Message}
		}
	}
	return out
}

// filter is the intents list's filter. Namespace "" is every namespace the
// principal sees.
type filter = intentdb.Filter

// list returns up to limit intents matching f with an id below before (0:
// from the newest), newest first.
func (q *queries) list(ctx context.Context, f *filter, before int64, limit int) ([]*row, error) {
	rows, err := q.queries.Browse(ctx, q.pool, f, before, limit)
	if err != nil {
		return nil, fmt.Errorf("error listing intents: %w", err)
	}
	return rowsOf(rows), nil
}

// pendingMatching returns up to limit pending intents matching f, oldest
// first: a bulk cancel's selection.
func (q *queries) pendingMatching(ctx context.Context, f *filter, limit int) ([]*row, error) {
	g := *f
	g.States = []string{string(outbox.StatePending)}
	rows, err := q.queries.BrowseOldest(ctx, q.pool, &g, limit)
	if err != nil {
		return nil, fmt.Errorf("error selecting pending intents: %w", err)
	}
	return rowsOf(rows), nil
}

// inState returns up to limit intents of namespace ("" for all) in state,
// oldest first: the unknown queue and the approvals.
func (q *queries) inState(ctx context.Context, namespace string, state outbox.State, limit int) ([]*row, error) {
	rows, err := q.queries.InState(ctx, q.pool, namespace, string(state), limit)
	if err != nil {
		return nil, fmt.Errorf("error listing %s intents: %w", state, err)
	}
	return rowsOf(rows), nil
}

// overview is the overview's numbers.
type overview = intentdb.Overview

func (q *queries) overview(ctx context.Context, namespace string) (*overview, error) {
	return q.queries.Overview(ctx, q.pool, namespace)
}

// job is one of an intent's River jobs.
type job = intentdb.Job

// jobs returns the River jobs that ran, or run, the intent's attempts: its
// current job, any job of its own, and the batches that held it, each with
// the output of the intent's own (batchOutput).
// sentArgs returns what the last attempt of intent id that recorded them
// sent its provider, nil when none did.
func (q *queries) sentArgs(ctx context.Context, id int64) (*intentdb.SentArgs, error) {
	sent, err := q.queries.SentArgsOf(ctx, q.pool, id)
	if err != nil {
		return nil, fmt.Errorf("error reading the intent's sent arguments: %w", err)
	}
	return sent, nil
}

// providerTask returns the task intent id's provider holds its work as,
// and the cancel asked of it (intentdb.ProviderTask).
func (q *queries) providerTask(ctx context.Context, id int64) (*intentdb.ProviderTask, error) {
	pt, err := q.queries.ProviderTaskOf(ctx, q.pool, id)
	if err != nil {
		return nil, fmt.Errorf("error reading the intent's provider task: %w", err)
	}
	return pt, nil
}

func (q *queries) jobs(ctx context.Context, intentID int64, jobID *int64) ([]*job, error) {
	jobs, err := q.queries.Jobs(ctx, q.pool, intentID, jobID)
	if err != nil {
		return nil, fmt.Errorf("error reading River jobs: %w", err)
	}
	for _, j := range jobs {
		j.Output = batchOutput(j.Output, intentID)
	}
	return jobs, nil
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

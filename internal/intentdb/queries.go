package intentdb

import (
	"context"
	"embed"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Queries runs the intent table's statements in one schema. It is safe for
// concurrent use.
type Queries struct {
	schema string

	sqlEnqueueManyFast, sqlEnqueueManyNew                                                            string
	sqlCancel, sqlEnqueue, sqlEnqueueMany, sqlEnqueueRetry, sqlGet, sqlGetWhole, sqlList, sqlResolve string
	sqlSetOrigin, sqlListAwaiting, sqlListUnknown                                                    string
	sqlDrainCommit, sqlDrainFailInvalid, sqlDrainLock, sqlDrainOffset, sqlDrainQueue                 string
	sqlDrainSnapshot, sqlDrainStream                                                                 string
	sqlClaim, sqlFinish, sqlMaybeSent, sqlRead, sqlStates                                            string
	sqlCountByState, sqlCreatedAt, sqlPrune                                                          string
	sqlRedispatch, sqlStranded, sqlUnserved                                                          string
	sqlPruneRecentActions, sqlRecentAction, sqlRecordAction                                          string
	sqlGetByID, sqlGetForUpdate, sqlApprove, sqlDeny, sqlExpire, sqlUnannounced, sqlAnnounced        string
	sqlRulesDelete, sqlRulesInsert, sqlRules, sqlRulesLock                                           string
	sqlBatchOwned, sqlBatchCurrent, sqlBatchLock, sqlBatchStates, sqlHandOver                        string
	sqlRegister, sqlLock, sqlHeartbeat, sqlUnregister                                                string
	sqlBrowse, sqlBrowseOldest, sqlInState, sqlInStateUnknown, sqlInStateAwaiting                    string
	sqlOverviewCounts, sqlOverviewLastHour, sqlJobs, sqlLeader, sqlLockAction                        string
	sqlDeadJobs, sqlRescueJobs, sqlExpireLeases, sqlPruneProcesses                                   string
	sqlStateKey, sqlRequestedHost, sqlUseState, sqlStatesUsed                                        string
	sqlCheckpoint, sqlSetCheckpoint, sqlRequestCancel, sqlCancelRequested, sqlProviderTask           string
	sqlRecordUpstreamLock, sqlUpstreamLocks                                                          string
	sqlSentArgs, sqlSetSentArgs                                                                      string
}

// statements are the long statements, each in a file of its own beside
// the Go that runs it, so that a review reads SQL rather than string
// concatenation (and an editor colours it as SQL).
//
//go:embed sql/*.sql
var statements embed.FS

// statement returns sql/name.sql, to be rendered. The files are embedded:
// a missing one is a bug, caught by every test that builds Queries.
func statement(name string) string {
	b, err := statements.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic("intentdb: " + err.Error())
	}
	return string(b)
}

// New returns the statements of schema, rendered once.
func New(schema string) *Queries {
	q := &Queries{schema: schema}
	// The statements' own placeholders first (columns and shared
	// fragments, which may hold the schema's), then the schema's (Render).
	own := strings.NewReplacer(
		"{{columns}}", columns(""),
		"{{t.columns}}", columns("t."),
		"{{i.columns}}", columns("i."),
		"{{ins.columns}}", columns("ins."),
		"{{r.intent.columns}}", columns("(r.intent)."),
		"{{new_columns}}", strings.Join(newColumns, ", "),
		"{{ins.new_columns}}", columnsOf("ins.", newColumns),
		"{{batch_notified}}", batchNotified,
		"{{job_kind}}", jobKind,
		"{{drain_idle_timeout_ms}}", strconv.Itoa(int(DrainIdleTimeout.Milliseconds())),
	)
	r := func(sql string) string { return Render(own.Replace(sql), schema) }
	q.renderClient(r)
	q.renderDrain(r)
	q.renderAttempt(r)
	q.renderMaintenance(r)
	q.renderReconcile(r)
	q.renderRecentAction(r)
	q.renderApproval(r)
	q.renderBatch(r)
	q.renderProcess(r)
	q.renderBrowse(r)
	q.renderHostApproval(r)
	q.renderCheckpoint(r)
	q.renderUpstreamLock(r)
	q.renderSentArgs(r)
	return q
}

// Schema returns the schema the statements run in.
func (q *Queries) Schema() string { return q.schema }

// batchNotified is the body of a batch insert's "notified" CTE: it wakes
// the dispatcher's drain when the CTE "ins" inserted anything, at most once
// per NotifyWindow per session, as the single enqueue does.
const batchNotified = `
			SELECT pg_notify('{{channel_pending}}', ''),
			       set_config('{{guc_notified}}', clock_timestamp()::text, false)
			WHERE EXISTS (SELECT 1 FROM ins)
			  AND coalesce(nullif(current_setting('{{guc_notified}}', true), ''), '-infinity')::timestamptz
			      <= clock_timestamp() - interval '{{notify_window}}'
		`

// GetWhole returns intent id of namespace as Get does (with its job's
// kind), or pgx.ErrNoRows: one look-up by primary key, for a caller that
// holds the id (an MCP task's).
func (q *Queries) GetWhole(ctx context.Context, db Querier, namespace string, id int64) (*Row, error) {
	var kind *string
	r, err := scanRow(db.QueryRow(ctx, q.sqlGetWhole, id, namespace), &kind)
	if err != nil {
		return nil, err
	}
	r.JobKind = kind
	return r, nil
}

// Get returns the intent (namespace, key), or pgx.ErrNoRows.
func (q *Queries) Get(ctx context.Context, db Querier, namespace, key string) (*Row, error) {
	var kind *string
	r, err := scanRow(db.QueryRow(ctx, q.sqlGet, namespace, key), &kind)
	if err != nil {
		return nil, err
	}
	r.JobKind = kind
	return r, nil
}

// jobKind is the kind of an intent's River job (outbox_intent i), NULL
// when it has none or River deleted it.
const jobKind = `(SELECT j.kind FROM {{schema}}.river_job j WHERE j.id = i.job_id)`

// ListParams filters List. Zero values do not filter.
type ListParams struct {
	// BeforeID keeps intents with a smaller id (the cursor).
	BeforeID  int64
	Effect    string
	Limit     int
	Namespace string
	States    []string
}

// List returns a namespace's intents, newest first.
func (q *Queries) List(ctx context.Context, db Querier, p *ListParams) ([]*Row, error) {
	states := p.States
	if states == nil {
		states = []string{}
	}
	sql := q.sqlList
	switch {
	case len(states) == 1 && states[0] == "unknown":
		sql = q.sqlListUnknown
	case len(states) == 1 && states[0] == "awaiting_approval":
		sql = q.sqlListAwaiting
	}
	rows, _ := db.Query(ctx, sql, p.Namespace, states, p.Effect, p.BeforeID, p.Limit)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Row, error) {
		var kind *string
		r, err := scanRow(row, &kind)
		if err != nil {
			return nil, err
		}
		r.JobKind = kind
		return r, nil
	})
}

// Cancel moves a pending intent that no attempt may have reached the
// provider for to cancelled, and returns it; pgx.ErrNoRows when it did not
// (the caller reads the intent to say why).
func (q *Queries) Cancel(ctx context.Context, db Querier, namespace, key, by, note string) (*Row, error) {
	return scanRow(db.QueryRow(ctx, q.sqlCancel, namespace, key, by, note))
}

// Resolve moves an unknown intent to state (succeeded, failed, or pending
// for a knowing resend) and returns it; pgx.ErrNoRows when the intent is not
// unknown.
func (q *Queries) Resolve(ctx context.Context, db Querier, namespace, key, state, note, by string) (*Row, error) {
	return scanRow(db.QueryRow(ctx, q.sqlResolve, namespace, key, state, note, by))
}

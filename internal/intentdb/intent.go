package intentdb

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what a reading statement runs on: a *pgxpool.Pool, a
// *pgx.Conn, or a pgx.Tx (the caller's transaction, or a savepoint).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DBTX is what any statement runs on: a Querier that also executes.
type DBTX interface {
	Querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Error is the error recorded on an intent, as stored in its error column.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ErrorJSON encodes an intent error for the error column.
func ErrorJSON(code, message string) json.RawMessage {
	b, _ := json.Marshal(Error{Code: code, Message: message}) //nolint:errchkjson // two strings always encode
	return b
}

// Row is one intent row, as every read of a whole intent returns it.
type Row struct {
	ID             int64
	Namespace      string
	Key            string
	Effect         string
	Args           json.RawMessage
	State          string
	Attempt        int
	Result         json.RawMessage
	Error          *Error
	ProviderKey    string
	RequestedBy    *string
	KeySource      string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    *time.Time
	JobID          *int64
	LeaseExpiresAt *time.Time
	MaybeSent      bool
	ResolvedBy     *string
	ResolutionNote *string
	ResolvedAt     *time.Time
	ApprovalRule   *string
	ApprovedBy     *string
	ApprovedAt     *time.Time
	DeniedBy       *string
	DeniedAt       *time.Time
	ApprovalNote   *string
	EnqueuedBy     *string

	// JobKind is the kind of JobID's River job, read by Get and List only
	// (the other statements leave it nil): nil too when River has deleted
	// the job.
	JobKind *string
}

// rowColumns lists the columns scanRow reads, in its order.
var rowColumns = []string{
	"id", "namespace", "key", "effect", "args", "state", "attempt", "result", "error",
	"provider_key", "requested_by", "key_source", "created_at", "updated_at", "completed_at",
	"job_id", "lease_expires_at", "maybe_sent", "resolved_by", "resolution_note", "resolved_at",
	"approval_rule", "approved_by", "approved_at", "denied_by", "denied_at", "approval_note",
	"enqueued_by",
}

// columns returns rowColumns, each prefixed (a table alias, or "(r.intent)."
// for a composite returned by a function).
func columns(prefix string) string { return columnsOf(prefix, rowColumns) }

// newColumns lists the columns of a row just inserted that its insert
// statement did not set or that the insert triggers may change; the
// others hold their defaults (see scanNewRow).
var newColumns = []string{
	"id", "namespace", "key", "effect", "args", "state", "provider_key", "requested_by", "key_source",
	"created_at", "updated_at", "approval_rule", "enqueued_by",
}

// columnsOf returns cols, each prefixed.
func columnsOf(prefix string, cols []string) string {
	out := make([]string, len(cols))
	for i, col := range cols {
		out[i] = prefix + col
	}
	return strings.Join(out, ", ")
}

// scanNewRow reads newColumns (and extra) into a Row of a freshly inserted
// intent: attempt 0, not maybe sent, and every other column NULL, as the
// table's defaults and insert triggers leave it (migrations/).
func scanNewRow(row pgx.Row, extra ...any) (*Row, error) {
	var r Row
	dest := []any{
		&r.ID, &r.Namespace, &r.Key, &r.Effect, &r.Args, &r.State, &r.ProviderKey, &r.RequestedBy, &r.KeySource,
		&r.CreatedAt, &r.UpdatedAt, &r.ApprovalRule, &r.EnqueuedBy,
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	return &r, nil
}

func scanRow(row pgx.Row, extra ...any) (*Row, error) {
	var r Row
	dest := []any{
		&r.ID, &r.Namespace, &r.Key, &r.Effect, &r.Args, &r.State, &r.Attempt, &r.Result, &r.Error,
		&r.ProviderKey, &r.RequestedBy, &r.KeySource, &r.CreatedAt, &r.UpdatedAt, &r.CompletedAt,
		&r.JobID, &r.LeaseExpiresAt, &r.MaybeSent, &r.ResolvedBy, &r.ResolutionNote, &r.ResolvedAt,
		&r.ApprovalRule, &r.ApprovedBy, &r.ApprovedAt, &r.DeniedBy, &r.DeniedAt, &r.ApprovalNote,
		&r.EnqueuedBy,
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	return &r, nil
}

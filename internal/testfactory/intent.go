// Package testfactory writes rows for tests, as River's testfactory does:
// one function per kind of row, whose options name the columns a test
// cares about and default the rest, so that a test says what state it
// starts from rather than how the table stores it.
package testfactory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// Executor is what Intent writes with: a pool, a transaction (TestTx's) or a
// connection.
type Executor interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// IntentOpts are the columns of an intent Intent writes. A nil field takes
// the column's default, as an enqueue would leave it (pending, no attempt,
// no job), but for those said otherwise below.
type IntentOpts struct {
	// ApprovalRule is why the intent needs approval ("requested" when its
	// caller asked); with State awaiting_approval for one that waits.
	ApprovalRule *string
	// Args are the effect's arguments, a JSON object. Defaults to {}.
	Args json.RawMessage
	// Attempt is the number of attempts that claimed the intent.
	Attempt *int
	// CompletedAt is when the intent became terminal.
	CompletedAt *time.Time
	// CreatedAt is when the intent was enqueued. Defaults to now.
	CreatedAt *time.Time
	// Effect is the effect's name. Defaults to "noop".
	Effect string
	// Error is the error column, a JSON object like {"code": ..., "message": ...}.
	Error json.RawMessage
	// JobAttempt is the River attempt of JobID that last recorded an outcome.
	JobAttempt *int
	// JobID is the River job the intent was dispatched to.
	JobID *int64
	// Key is the idempotency key. Defaults to a key no other Intent of the
	// binary wrote, so that tests sharing TestTx's schema don't collide.
	Key string
	// LeaseExpiresAt is when a running intent's claim lapses.
	LeaseExpiresAt *time.Time
	// MaybeSent says an attempt may have reached the provider.
	MaybeSent *bool
	// Namespace is the intent's namespace. Defaults to "default".
	Namespace string
	// RequestedBy names who asked.
	RequestedBy *string
	// Result is the provider's answer, a JSON value.
	Result json.RawMessage
	// Schema is the schema whose outbox_intent the row goes into. Required.
	Schema string
	// State is the intent's state. Defaults to pending.
	State outbox.State
}

// keySeq numbers the default keys.
var keySeq atomic.Int64

// Intent inserts an intent into opts.Schema with exec, and returns it as
// outbox.Client.GetTx reads it through exec. The table's triggers run as on
// any insert (the provider key, the checks, the unknown intents' table),
// so a row the table would refuse fails the test.
func Intent(ctx context.Context, tb testing.TB, exec Executor, opts *IntentOpts) *outbox.Intent {
	tb.Helper()
	if opts == nil || opts.Schema == "" {
		tb.Fatal("testfactory: IntentOpts.Schema is required")
	}
	namespace := cmp.Or(opts.Namespace, outbox.NamespaceDefault)
	key := cmp.Or(opts.Key, fmt.Sprintf("factory-%d-%d", time.Now().UnixNano(), keySeq.Add(1)))
	args := opts.Args
	if args == nil {
		args = json.RawMessage(`{}`)
	}

	columns := []string{"namespace", "key", "effect", "args"}
	values := []any{namespace, key, cmp.Or(opts.Effect, "noop"), args}
	add := func(column string, value any) {
		columns = append(columns, column)
		values = append(values, value)
	}
	if opts.ApprovalRule != nil {
		add("approval_rule", *opts.ApprovalRule)
	}
	if opts.Attempt != nil {
		add("attempt", *opts.Attempt)
	}
	if opts.CompletedAt != nil {
		add("completed_at", *opts.CompletedAt)
	}
	if opts.CreatedAt != nil {
		add("created_at", *opts.CreatedAt)
	}
	if opts.Error != nil {
		add("error", opts.Error)
	}
	if opts.JobAttempt != nil {
		add("job_attempt", *opts.JobAttempt)
	}
	if opts.JobID != nil {
		add("job_id", *opts.JobID)
	}
	if opts.LeaseExpiresAt != nil {
		add("lease_expires_at", *opts.LeaseExpiresAt)
	}
	if opts.MaybeSent != nil {
		add("maybe_sent", *opts.MaybeSent)
	}
	if opts.RequestedBy != nil {
		add("requested_by", *opts.RequestedBy)
	}
	if opts.Result != nil {
		add("result", opts.Result)
	}
	if opts.State != "" {
		add("state", string(opts.State))
	}

	placeholders := make([]string, len(columns))
	for i := range columns {
		placeholders[i] = fmt.Sprintf("$%d", i+1)
	}
	// Built from the column list above, whose names are constants; the
	// values are parameters.
	query := "INSERT INTO " + pgx.Identifier{opts.Schema, "outbox_intent"}.Sanitize() + //nolint:gosec // G202: see above
		" (" + strings.Join(columns, ", ") + ") VALUES (" + strings.Join(placeholders, ", ") + ") RETURNING id"
	var id int64
	err := exec.QueryRow(ctx, query, values...).Scan(&id)
	if err != nil {
		tb.Fatalf("testfactory: error inserting intent %s/%s: %v", namespace, key, err)
	}

	client, err := outbox.NewClient(testdb.Pool(tb), &outbox.Config{Schema: opts.Schema})
	if err != nil {
		tb.Fatalf("testfactory: %v", err)
	}
	intent, err := client.GetTx(ctx, exec, namespace, key)
	if err != nil {
		tb.Fatalf("testfactory: error reading intent %s/%s back: %v", namespace, key, err)
	}
	return intent
}

// Ptr returns a pointer to v, for IntentOpts' optional fields.
func Ptr[T any](v T) *T { return &v }

package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/origin"
	"github.com/outbox-dev/outbox/migrations"
)

// SchemaDefault is the schema holding outbox's and River's tables: the
// migrations' (migrations.SchemaDefault), named here for callers of the
// library.
const SchemaDefault = migrations.SchemaDefault

// Executor is what the Tx forms (EnqueueTx, GetTx, CancelTx...) need: a
// pgx.Tx, a savepoint (also a pgx.Tx), a *pgx.Conn or a *pgxpool.Pool all
// fit. Pass a transaction: the point of a Tx form is to commit or roll back
// with the caller's own writes.
type Executor interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// EnqueueOutcome is what an enqueue did, for EnqueueObserverFunc.
type EnqueueOutcome string

const (
	// EnqueueOutcomeCreated is a new intent.
	EnqueueOutcomeCreated EnqueueOutcome = "created"
	// EnqueueOutcomeDuplicate is the same action again: answered with the
	// first intent.
	EnqueueOutcomeDuplicate EnqueueOutcome = "duplicate"
	// EnqueueOutcomeConflict is a key first used for another action.
	EnqueueOutcomeConflict EnqueueOutcome = "conflict"
)

// Config configures a Client.
type Config struct {
	// ApprovalObserverFunc, when set, is called after every approval or
	// denial this client recorded, with the intent's effect and the
	// decision (for metrics). ApproveTx and DenyTx call it before the
	// caller's transaction commits, so a rolled-back decision is counted
	// too. Defaults to nil.
	ApprovalObserverFunc func(effect string, decision ApprovalDecision)

	// EnqueueObserverFunc, when set, is called after every enqueue that
	// reached the database, with the effect and what the enqueue did (for
	// metrics). It runs before the caller's transaction commits, so a
	// rolled-back intent is counted too. Defaults to nil.
	EnqueueObserverFunc func(effect string, outcome EnqueueOutcome)

	// Effects are the enabled effects. EnqueueTx refuses an effect that is not
	// among them (ErrUnknownEffect) and validates arguments with it
	// (ErrInvalidArgs). When nil, any effect name is accepted and arguments
	// are only checked to be a JSON object; the dispatcher validates them
	// later and fails invalid intents with invalid_args. Defaults to nil.
	Effects *effects.Registry

	// Logger receives the client's diagnostics. Defaults to a logger that
	// discards.
	Logger *slog.Logger

	// PollOnly says that the pool's connections are not sessions of their
	// own (a transaction pooler, PgBouncer with pool_mode=transaction),
	// where a LISTEN hears nothing: Wait then reads the intent again every
	// WaitPollInterval instead, unless SessionPool is set. EnqueueTx and
	// the other operations need no session and are the same either way.
	// Defaults to false (docs/operations.md, "Behind PgBouncer").
	PollOnly bool

	// Schema is the schema holding the outbox tables. Defaults to
	// SchemaDefault.
	Schema string

	// SessionPool, when set, holds the one LISTEN connection Wait shares,
	// instead of the client's pool: a direct connection or a session-mode
	// pooler, when the client's pool goes through a transaction pooler.
	// Defaults to the client's pool.
	SessionPool *pgxpool.Pool
}

// WaitPollInterval is how often Wait reads an intent again when it cannot
// listen (Config.PollOnly without a SessionPool).
const WaitPollInterval = 250 * time.Millisecond

// Client enqueues, reads and resolves intents. It is safe for concurrent use.
type Client struct {
	approved func(effect string, decision ApprovalDecision)
	group    enqueueGroup
	// groupHook, set by tests, sees each group's calls after its statement.
	groupHook func(calls []*groupCall, err error)
	notifier  *notifier
	effects   *effects.Registry
	observer  func(effect string, outcome EnqueueOutcome)
	logger    *slog.Logger
	pool      *pgxpool.Pool
	// listenPool holds the waits' LISTEN connection; nil when Wait polls.
	listenPool *pgxpool.Pool
	queries    *intentdb.Queries
	schema     string
}

// NewClient returns a client. pool serves waits and the operations without
// a Tx suffix (Enqueue, Get, Cancel...); the Tx forms run on the executor
// each call is given.
func NewClient(pool *pgxpool.Pool, config *Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("outbox: pool must not be nil")
	}
	if config == nil {
		config = &Config{}
	}
	c := &Client{
		approved: config.ApprovalObserverFunc,
		effects:  config.Effects,
		observer: config.EnqueueObserverFunc,
		logger:   config.Logger,
		pool:     pool,
		schema:   config.Schema,
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.schema == "" {
		c.schema = SchemaDefault
	}
	switch {
	case config.SessionPool != nil:
		c.listenPool = config.SessionPool
	case !config.PollOnly:
		c.listenPool = pool
	}
	c.queries = intentdb.New(c.schema)
	c.group.run = c.runGroup
	c.notifier = newNotifier(c)
	return c, nil
}

// Schema returns the client's schema.
func (c *Client) Schema() string { return c.schema }

// Effects returns the client's enabled effects; nil when any effect name is
// accepted (Config.Effects was nil).
func (c *Client) Effects() *effects.Registry { return c.effects }

// EnqueueParams describes one intent to enqueue.
type EnqueueParams struct {
	// Args are the effect's arguments: anything that marshals to a JSON
	// object (a struct, a map, or json.RawMessage / []byte holding JSON).
	Args any
	// Effect is the effect's name.
	Effect string
	// Key is the idempotency key naming the logical action.
	Key string
	// Namespace is the tenant. Defaults to NamespaceDefault.
	Namespace string
	// RequestedBy optionally names who asked: the client's own label.
	// Defaults to none.
	RequestedBy string
	// RequireApproval records the intent as awaiting_approval: nothing runs
	// until an operator approves it (Approve). Approval rules apply whether
	// or not it is set; it can only add a brake, never lift one.
	RequireApproval bool
}

// EnqueueResult is the answer to an enqueue.
type EnqueueResult struct {
	// Duplicate is true when the key was already recorded for the same
	// action; Intent is then the first one, in whatever state it is.
	Duplicate bool
	// Intent is the intent.
	Intent *Intent
}

// prepare checks and normalises p for the database, with the origin ctx
// carries (internal/origin: outboxd's surfaces say who enqueues and how the
// key was made; a library caller's intents are explicit and by nobody).
// Every check that the database would otherwise make is made here: a
// refusal there would abort the caller's transaction.
func (c *Client) prepare(ctx context.Context, p *EnqueueParams) (*intentdb.EnqueueRow, error) {
	if p == nil {
		return nil, &Error{Code: CodeInvalidArgs, Message: "params must not be nil"}
	}
	from := origin.From(ctx)
	out := &intentdb.EnqueueRow{
		Effect:    p.Effect,
		Key:       p.Key,
		KeySource: from.KeySource,
		Namespace: p.Namespace,

		RequireApproval: p.RequireApproval,
	}
	if out.Namespace == "" {
		out.Namespace = NamespaceDefault
	}
	if err := ValidateNamespace(out.Namespace); err != nil {
		return nil, err
	}
	if err := ValidateKey(p.Key); err != nil {
		return nil, err
	}
	switch KeySource(from.KeySource) {
	case "":
		out.KeySource = string(KeySourceExplicit)
	case KeySourceExplicit, KeySourceAuto, KeySourceModelConfirmed:
	default:
		return nil, &Error{Code: CodeInvalidArgs, Field: "key_source", Message: "must be explicit, auto or model_confirmed"}
	}
	// Checked here, as args are: the database would refuse a NUL byte or
	// invalid UTF-8 in text, and its refusal would abort the caller's
	// transaction.
	switch {
	case len(p.RequestedBy) > 255:
		return nil, &Error{Code: CodeInvalidArgs, Field: "requested_by", Message: "must be at most 255 characters"}
	case !utf8.ValidString(p.RequestedBy):
		return nil, &Error{Code: CodeInvalidArgs, Field: "requested_by", Message: "must be valid UTF-8"}
	case strings.IndexByte(p.RequestedBy, 0) >= 0:
		return nil, &Error{Code: CodeInvalidArgs, Field: "requested_by", Message: "must not contain a NUL byte"}
	}
	if p.RequestedBy != "" {
		rb := p.RequestedBy
		out.RequestedBy = &rb
	}
	if from.EnqueuedBy != "" {
		eb := from.EnqueuedBy
		out.EnqueuedBy = &eb
	}

	effect, known := c.effects.Get(p.Effect)
	// An effect this namespace may not use is answered as one not enabled:
	// a namespace does not learn of another's tools.
	if c.effects != nil && (!known || !effects.AllowedIn(effect, out.Namespace)) {
		return nil, &Error{Code: CodeUnknownEffect, Field: "effect", Message: fmt.Sprintf("effect %q is not enabled", p.Effect)}
	}
	if c.effects == nil && !effects.ValidName(p.Effect) {
		return nil, &Error{Code: CodeUnknownEffect, Field: "effect", Message: fmt.Sprintf("effect %q is not a valid effect name", p.Effect)}
	}

	args, err := marshalArgs(p.Args)
	if err != nil {
		return nil, err
	}
	if effect != nil {
		if err := effect.ValidateArgs(args); err != nil {
			return nil, argsError(err)
		}
	}
	out.Args = args
	return out, nil
}

// EnqueueTx records one intent in the caller's transaction with a single
// statement. A new key returns the new intent; the same key for the same
// action returns the first intent with Duplicate set; the same key for
// another action returns a *KeyReusedError (errors.Is ErrKeyReused) and
// leaves the caller's transaction usable.
//
// When ctx carries an OpenTelemetry span, the intent records it as its W3C
// traceparent, for the attempts' spans to link to; a duplicate keeps the
// first enqueue's.
func (c *Client) EnqueueTx(ctx context.Context, tx Executor, params *EnqueueParams) (*EnqueueResult, error) {
	p, err := c.prepare(ctx, params)
	if err != nil {
		return nil, err
	}
	p.Traceparent = traceparent(ctx)
	res, err := c.queries.Enqueue(ctx, tx, p)
	return c.answer(p.Effect, res, err)
}

// Enqueue records one intent in a transaction of its own, for callers
// without one to join (the HTTP API's enqueues with the caller's own key go
// this way). It answers as EnqueueTx does. Concurrent calls on one Client
// share a statement and its commit: while one runs, the calls that arrive
// wait for it and go together, each answered as if it had gone alone (a
// key repeated among them is recorded once, the others answered as its
// duplicates, or with a *KeyReusedError). A call whose ctx ends before its
// statement is sent writes nothing; after, as with any statement, the
// intent may be recorded, and enqueuing the key again tells. ctx's span is
// recorded as EnqueueTx records it.
func (c *Client) Enqueue(ctx context.Context, params *EnqueueParams) (*EnqueueResult, error) {
	p, err := c.prepare(ctx, params)
	if err != nil {
		return nil, err
	}
	p.Traceparent = traceparent(ctx)
	res, err := c.group.do(ctx, p)
	if err == nil && res == nil {
		// The group could not answer for this intent (another transaction
		// recorded its key meanwhile, or held a lock past the group's
		// limit, or the group's statement was refused having written
		// nothing): alone, as EnqueueTx on the pool.
		res, err = c.queries.Enqueue(ctx, c.pool, p)
	}
	return c.answer(p.Effect, res, err)
}

// answer maps the result of an enqueue of effect to the client's: a
// conflict is a *KeyReusedError.
func (c *Client) answer(effect string, res *intentdb.EnqueueResult, err error) (*EnqueueResult, error) {
	if err != nil {
		return nil, c.dbError("error enqueueing intent", err)
	}
	c.observe(effect, res.Duplicate, res.Conflict)
	if res.Conflict {
		return nil, &KeyReusedError{Existing: intentFromRow(res.Row)}
	}
	return &EnqueueResult{Duplicate: res.Duplicate, Intent: intentFromRow(res.Row)}, nil
}

func (c *Client) observe(effect string, duplicate, conflict bool) {
	if c.observer == nil {
		return
	}
	switch {
	case conflict:
		c.observer(effect, EnqueueOutcomeConflict)
	case duplicate:
		c.observer(effect, EnqueueOutcomeDuplicate)
	default:
		c.observer(effect, EnqueueOutcomeCreated)
	}
}

// EnqueueManyTx records many intents in the caller's transaction with a
// single statement, atomically: either every intent is recorded (new or
// duplicate), or, when one key was used for another action, none is and a
// *KeyReusedError names the conflicting intent (the caller's transaction
// stays usable). Results are in the order of params. ctx's span is
// recorded on every new intent, as EnqueueTx records it.
func (c *Client) EnqueueManyTx(ctx context.Context, tx Executor, params []*EnqueueParams) ([]*EnqueueResult, error) {
	if len(params) == 0 {
		return nil, nil
	}
	// One span for the whole batch: formatted once, shared by every row.
	tp := traceparent(ctx)
	rows := make([]*intentdb.EnqueueRow, len(params))
	for i, params := range params {
		p, err := c.prepare(ctx, params)
		if err != nil {
			var oe *Error
			if errors.As(err, &oe) && oe.Field != "" {
				oe.Field = fmt.Sprintf("[%d].%s", i, oe.Field)
			}
			return nil, err
		}
		p.Traceparent = tp
		rows[i] = p
	}
	found, err := c.queries.EnqueueMany(ctx, tx, rows)
	if err != nil {
		return nil, c.dbError("error enqueueing intents", err)
	}
	// On a conflict the function answers with the conflicting intent only,
	// having written nothing.
	results := make([]*EnqueueResult, len(found))
	for i, res := range found {
		if res == nil {
			continue
		}
		c.observe(res.Row.Effect, res.Duplicate, res.Conflict)
		if res.Conflict {
			return nil, &KeyReusedError{Existing: intentFromRow(res.Row)}
		}
		results[i] = &EnqueueResult{Duplicate: res.Duplicate, Intent: intentFromRow(res.Row)}
	}
	for i, res := range results {
		if res == nil {
			return nil, fmt.Errorf("error enqueueing intents: no answer for intent %d", i)
		}
	}
	return results, nil
}

// EnqueueMany records many intents in a transaction of its own, for
// callers without one to join. It answers as EnqueueManyTx does: all the
// intents are recorded, or, on a *KeyReusedError, none.
func (c *Client) EnqueueMany(ctx context.Context, params []*EnqueueParams) ([]*EnqueueResult, error) {
	if len(params) == 0 {
		return nil, nil
	}
	return dbutil.WithTxV(ctx, c.pool, func(tx pgx.Tx) ([]*EnqueueResult, error) {
		return c.EnqueueManyTx(ctx, tx, params)
	})
}

// dbError maps constraint violations that input checks should have caught
// (for example a jsonb the database refuses) to invalid_args, and wraps the rest.
func (c *Client) dbError(msg string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgerrcode.IsDataException(pgErr.Code), pgErr.Code == pgerrcode.StatementTooComplex:
			// Class 22 is data exceptions: jsonb refused the arguments
			// (invalid text, a number out of range such as 1e1000000, an
			// untranslatable character); 54001 is statement_too_complex,
			// which very deep nesting raises. The input is at fault.
			return &Error{Code: CodeInvalidArgs, Field: "args", Message: pgErr.Message}
		case pgErr.Code == pgerrcode.CheckViolation:
			return &Error{Code: CodeInvalidArgs, Message: "refused by constraint " + pgErr.ConstraintName}
		}
	}
	return fmt.Errorf("%s: %w", msg, err)
}

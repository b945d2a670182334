package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/effects"
)

// SchemaDefault is the schema holding outbox's and River's tables.
const SchemaDefault = "outbox"

// Executor is what EnqueueTx needs: a pgx.Tx, a savepoint (also a pgx.Tx), a
// *pgx.Conn or a *pgxpool.Pool all fit. Pass a transaction: the point of an
// enqueue is to commit or roll back with the caller's own writes.
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

	// Schema is the schema holding the outbox tables. Defaults to
	// SchemaDefault.
	Schema string
}

// Client enqueues, reads and resolves intents. It is safe for concurrent use.
type Client struct {
	notifier *notifier
	effects  *effects.Registry
	observer func(effect string, outcome EnqueueOutcome)
	logger   *slog.Logger
	pool     *pgxpool.Pool
	schema   string

	// SQL, rendered once for the schema.
	sqlEnqueue, sqlEnqueueRetry, sqlEnqueueMany, sqlGet, sqlGetByID, sqlList, sqlCancel, sqlResolve string
	channelChanged                                                                                  string
}

// NewClient returns a client. pool serves reads, waits and operator actions;
// enqueues run on the executor each call is given.
func NewClient(pool *pgxpool.Pool, config *Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("outbox: pool must not be nil")
	}
	if config == nil {
		config = &Config{}
	}
	c := &Client{
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
	c.prepareSQL()
	c.notifier = newNotifier(c)
	return c, nil
}

// Schema returns the client's schema.
func (c *Client) Schema() string { return c.schema }

func quoteLiteral(s string) string { return strings.ReplaceAll(s, "'", "''") }

func prefixed(prefix string) string {
	cols := make([]string, len(intentColumns))
	for i, col := range intentColumns {
		cols[i] = prefix + col
	}
	return strings.Join(cols, ", ")
}

func (c *Client) prepareSQL() {
	s := pgx.Identifier{c.schema}.Sanitize()
	table := s + ".outbox_intent"
	all := prefixed("")
	c.channelChanged = c.schema + ".intent_changed"

	// The enqueue is one statement. Its usual case, a new key or a key
	// recorded long ago, is this plain statement. It does what the SQL
	// function outbox_enqueue_try does, without a plpgsql call (a third of
	// the cost of an enqueue). It returns no row in one race only: a
	// concurrent enqueue of the same key committed while the INSERT waited
	// for it, after this statement's snapshot was taken, so the SELECT
	// cannot see that row. EnqueueTx then calls outbox_enqueue_try
	// (sqlEnqueueRetry), whose statements take fresh snapshots.
	//
	// The notification wakes the dispatcher's drain; like the function, a
	// session notifies at most once a second, because a notifying commit
	// holds a database-wide lock until it is durable (see the migration).
	guc := "outbox.notified_" + c.schema
	c.sqlEnqueue = `WITH ins AS (
			INSERT INTO ` + table + ` (namespace, key, effect, args, provider_key, requested_by, key_source)
			VALUES ($1, $2, $3, $4, ` + s + `.outbox_provider_key($1, $2), $5, $6)
			ON CONFLICT (namespace, key) DO NOTHING
			RETURNING ` + all + `
		), notified AS (
			SELECT pg_notify('` + quoteLiteral(c.schema+".intent_pending") + `', ''),
			       set_config('` + guc + `', clock_timestamp()::text, false)
			FROM ins
			WHERE coalesce(nullif(current_setting('` + guc + `', true), ''), '-infinity')::timestamptz
			      <= clock_timestamp() - interval '1 second'
		)
		SELECT ` + all + `, false, false FROM ins, (SELECT count(*) FROM notified) n
		UNION ALL
		SELECT ` + all + `, true, NOT (effect = $3 AND args = $4::jsonb) FROM ` + table + `
		WHERE namespace = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM ins)`
	c.sqlEnqueueRetry = `SELECT ` + prefixed("(r.intent).") + `, r.duplicate, r.conflict
		FROM ` + s + `.outbox_enqueue_try($1, $2, $3, $4, $5, $6) r`
	c.sqlEnqueueMany = `SELECT ` + prefixed("(r.intent).") + `, r.duplicate, r.conflict, r.ord
		FROM ` + s + `.outbox_enqueue_many($1, $2, $3, $4, $5, $6) r`
	c.sqlGet = `SELECT ` + all + ` FROM ` + table + ` WHERE namespace = $1 AND key = $2`
	c.sqlGetByID = `SELECT ` + all + ` FROM ` + table + ` WHERE id = $1`
	c.sqlList = `SELECT ` + all + ` FROM ` + table + `
		WHERE namespace = $1
		  AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
		  AND ($3::text = '' OR effect = $3::text)
		  AND ($4::bigint = 0 OR id < $4::bigint)
		ORDER BY id DESC
		LIMIT $5`
	// Cancelling is allowed only while no attempt can be in flight, and
	// none that ran may have reached the provider (a pending intent after an
	// ambiguous attempt of a deduplicated effect may already have acted).
	// A deduplicated effect is not claimed before its call, so "in flight"
	// is read from its River job: running means an attempt may be calling
	// the provider right now. The job row is locked first (River fetches
	// with SKIP LOCKED, so it cannot start an attempt meanwhile) and read
	// in its newest committed state; after the cancel commits, an attempt
	// that starts finds the intent cancelled and does nothing.
	//
	// The UPDATE also requires job_id to be the one the job check read: a
	// drain that dispatched the intent while the UPDATE waited on its row
	// lock has made a job this statement never checked, so it refuses.
	c.sqlCancel = `WITH cur AS (
			SELECT job_id FROM ` + table + ` WHERE namespace = $1 AND key = $2
		), job AS (
			SELECT j.state FROM ` + s + `.river_job j
			WHERE j.id = (SELECT job_id FROM cur)
			FOR UPDATE
		), upd AS (
			UPDATE ` + table + `
			SET state = 'cancelled', completed_at = now(), updated_at = now()
			WHERE namespace = $1 AND key = $2 AND state = 'pending' AND NOT maybe_sent
			  AND job_id IS NOT DISTINCT FROM (SELECT job_id FROM cur)
			  AND NOT EXISTS (SELECT 1 FROM job WHERE job.state = 'running')
			RETURNING ` + all + `
		), notified AS (
			SELECT pg_notify('` + strings.ReplaceAll(c.channelChanged, "'", "''") + `', 'cancelled ' || id::text) FROM upd
		)
		SELECT ` + all + ` FROM upd, (SELECT count(*) FROM notified) n`
	// Resolving moves an unknown intent on. "retry" sends it again knowingly:
	// back to pending with no job, so the dispatcher gives it a fresh River
	// job, and maybe_sent cleared, because the operator has taken that risk
	// (otherwise a deduplicated intent past its window would turn unknown
	// again at once). The attempt number is kept: it is the fencing token and
	// must only grow.
	c.sqlResolve = `WITH upd AS (
			UPDATE ` + table + `
			SET state = $3,
			    result = CASE WHEN $3 = 'succeeded' THEN jsonb_build_object('resolved_by', 'operator', 'note', $4::text) ELSE result END,
			    error = CASE WHEN $3 = 'failed' THEN jsonb_build_object('code', 'resolved_failed', 'message', $4::text)
			                 WHEN $3 = 'pending' THEN NULL ELSE error END,
			    completed_at = CASE WHEN $3 = 'pending' THEN NULL ELSE now() END,
			    job_id = CASE WHEN $3 = 'pending' THEN NULL ELSE job_id END,
			    job_attempt = CASE WHEN $3 = 'pending' THEN 0 ELSE job_attempt END,
			    maybe_sent = CASE WHEN $3 = 'pending' THEN false ELSE maybe_sent END,
			    lease_expires_at = NULL,
			    updated_at = now()
			WHERE namespace = $1 AND key = $2 AND state = 'unknown'
			RETURNING ` + all + `
		), notified AS (
			SELECT pg_notify('` + strings.ReplaceAll(c.channelChanged, "'", "''") + `', state || ' ' || id::text) FROM upd
		), pending AS (
			SELECT pg_notify('` + strings.ReplaceAll(c.schema+".intent_pending", "'", "''") + `', '') FROM upd WHERE state = 'pending'
		)
		SELECT ` + all + ` FROM upd, (SELECT count(*) FROM notified) n, (SELECT count(*) FROM pending) p`
}

// EnqueueParams describes one intent to enqueue.
type EnqueueParams struct {
	// Args are the effect's arguments: anything that marshals to a JSON
	// object (a struct, a map, or json.RawMessage / []byte holding JSON).
	Args any
	// Effect is the effect's name.
	Effect string
	// Key is the idempotency key naming the logical action.
	Key string
	// KeySource records where the key came from. Defaults to KeySourceExplicit.
	KeySource KeySource
	// Namespace is the tenant. Defaults to NamespaceDefault.
	Namespace string
	// RequestedBy optionally names who asked. Defaults to none.
	RequestedBy string
}

// EnqueueResult is the answer to an enqueue.
type EnqueueResult struct {
	// Duplicate is true when the key was already recorded for the same
	// action; Intent is then the first one, in whatever state it is.
	Duplicate bool
	// Intent is the intent.
	Intent *Intent
}

// prepared is an EnqueueParams checked and normalised for the database.
type prepared struct {
	args        []byte
	effect      string
	key         string
	keySource   string
	namespace   string
	requestedBy *string
}

func (c *Client) prepare(p *EnqueueParams) (*prepared, error) {
	if p == nil {
		return nil, &Error{Code: CodeInvalidArgs, Message: "params must not be nil"}
	}
	out := &prepared{
		effect:    p.Effect,
		key:       p.Key,
		keySource: string(p.KeySource),
		namespace: p.Namespace,
	}
	if out.namespace == "" {
		out.namespace = NamespaceDefault
	}
	if err := ValidateNamespace(out.namespace); err != nil {
		return nil, err
	}
	if err := ValidateKey(p.Key); err != nil {
		return nil, err
	}
	switch p.KeySource {
	case "":
		out.keySource = string(KeySourceExplicit)
	case KeySourceExplicit, KeySourceAuto:
	default:
		return nil, &Error{Code: CodeInvalidArgs, Field: "key_source", Message: "must be explicit or auto"}
	}
	if len(p.RequestedBy) > 255 {
		return nil, &Error{Code: CodeInvalidArgs, Field: "requested_by", Message: "must be at most 255 characters"}
	}
	if p.RequestedBy != "" {
		rb := p.RequestedBy
		out.requestedBy = &rb
	}

	effect, known := c.effects.Get(p.Effect)
	if c.effects != nil && !known {
		return nil, &Error{Code: CodeUnknownEffect, Field: "effect", Message: fmt.Sprintf("effect %q is not enabled", p.Effect)}
	}
	if c.effects == nil && !validEffectName(p.Effect) {
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
	out.args = args
	return out, nil
}

func validEffectName(name string) bool {
	if name == "" || len(name) > 64 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// argsError turns an effect's validation error into an *Error naming the field.
func argsError(err error) error {
	var ae *effects.ArgError
	if errors.As(err, &ae) {
		field := "args"
		if ae.Field != "" {
			field = "args." + ae.Field
		}
		return &Error{Code: CodeInvalidArgs, Field: field, Message: ae.Message}
	}
	return &Error{Code: CodeInvalidArgs, Field: "args", Message: err.Error()}
}

func marshalArgs(args any) ([]byte, error) {
	var raw []byte
	switch a := args.(type) {
	case nil:
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "must be a JSON object"}
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	default:
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "cannot be encoded as JSON: " + err.Error()}
		}
	}
	trimmed := bytes.TrimSpace(raw)
	if !json.Valid(trimmed) {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "must be valid JSON"}
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "must be a JSON object"}
	}
	if !utf8.Valid(trimmed) {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "must be valid UTF-8"}
	}
	// Postgres's jsonb refuses \u0000 and unpaired surrogates, which
	// encoding/json lets through; say so here rather than surface a database
	// error that would also abort the caller's transaction.
	if msg := jsonbEscapeProblem(trimmed); msg != "" {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: msg}
	}
	if msg := jsonbLimitProblem(trimmed); msg != "" {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: msg}
	}
	return trimmed, nil
}

// Limits of what jsonb stores, checked before the database refuses them (a
// refusal there would abort the caller's transaction).
const (
	// argsDepthMax is the deepest nesting accepted; Postgres would stop at
	// its stack depth limit, far deeper, and no effect needs more.
	argsDepthMax = 100
	// argsExponentMax bounds a number's decimal exponent; numeric overflows
	// past about 131,072 digits.
	argsExponentMax = 100_000
)

// jsonbLimitProblem scans valid JSON for nesting deeper than argsDepthMax and
// numbers whose exponent numeric cannot hold. It does not allocate: it runs
// on every enqueue.
func jsonbLimitProblem(b []byte) string {
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > argsDepthMax {
				return "must not nest deeper than " + strconv.Itoa(argsDepthMax) + " levels"
			}
		case '}', ']':
			depth--
		case 'e', 'E':
			// Outside a string, only a number's exponent has an e.
			j := i + 1
			if j < len(b) && (b[j] == '+' || b[j] == '-') {
				j++
			}
			exp := 0
			for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
				if exp = exp*10 + int(b[j]-'0'); exp > argsExponentMax {
					return "has a number too large or too precise to store"
				}
			}
			i = j - 1
		}
	}
	return ""
}

// jsonbEscapeProblem finds the \u escapes of valid JSON that jsonb refuses.
func jsonbEscapeProblem(b []byte) string {
	hex := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 32)
		return rune(v), err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex(i)
		if !ok {
			continue
		}
		switch {
		case r == 0:
			return "must not contain \\u0000"
		case r >= 0xd800 && r <= 0xdbff:
			if lo, ok := hex(i + 6); !ok || lo < 0xdc00 || lo > 0xdfff {
				return "contains an unpaired UTF-16 surrogate escape"
			}
			i += 11
		case r >= 0xdc00 && r <= 0xdfff:
			return "contains an unpaired UTF-16 surrogate escape"
		default:
			i += 5
		}
	}
	return ""
}

// EnqueueTx records one intent in the caller's transaction with a single
// statement. A new key returns the new intent; the same key for the same
// action returns the first intent with Duplicate set; the same key for
// another action returns a *KeyReusedError (errors.Is ErrKeyReused) and
// leaves the caller's transaction usable.
func (c *Client) EnqueueTx(ctx context.Context, tx Executor, params *EnqueueParams) (*EnqueueResult, error) {
	p, err := c.prepare(params)
	if err != nil {
		return nil, err
	}
	var duplicate, conflict bool
	args := []any{p.namespace, p.key, p.effect, string(p.args), p.requestedBy, p.keySource}
	intent, err := scanIntent(tx.QueryRow(ctx, c.sqlEnqueue, args...), &duplicate, &conflict)
	if errors.Is(err, pgx.ErrNoRows) {
		// Lost the race described at sqlEnqueue: nothing was written.
		intent, err = scanIntent(tx.QueryRow(ctx, c.sqlEnqueueRetry, args...), &duplicate, &conflict)
	}
	if err != nil {
		return nil, c.dbError("error enqueueing intent", err)
	}
	c.observe(p.effect, duplicate, conflict)
	if conflict {
		return nil, &KeyReusedError{Existing: intent}
	}
	return &EnqueueResult{Duplicate: duplicate, Intent: intent}, nil
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
// stays usable). Results are in the order of params.
func (c *Client) EnqueueManyTx(ctx context.Context, tx Executor, params []*EnqueueParams) ([]*EnqueueResult, error) {
	if len(params) == 0 {
		return nil, nil
	}
	var (
		namespaces   = make([]string, len(params))
		keys         = make([]string, len(params))
		effectNames  = make([]string, len(params))
		args         = make([]string, len(params))
		requestedBys = make([]*string, len(params))
		keySources   = make([]string, len(params))
	)
	for i, params := range params {
		p, err := c.prepare(params)
		if err != nil {
			var oe *Error
			if errors.As(err, &oe) && oe.Field != "" {
				oe.Field = fmt.Sprintf("[%d].%s", i, oe.Field)
			}
			return nil, err
		}
		namespaces[i], keys[i], effectNames[i], args[i], requestedBys[i], keySources[i] =
			p.namespace, p.key, p.effect, string(p.args), p.requestedBy, p.keySource
	}

	rows, err := tx.Query(ctx, c.sqlEnqueueMany, namespaces, keys, effectNames, args, requestedBys, keySources)
	if err != nil {
		return nil, c.dbError("error enqueueing intents", err)
	}
	defer rows.Close()
	results := make([]*EnqueueResult, len(params))
	for rows.Next() {
		var duplicate, conflict bool
		var ord int
		intent, err := scanIntent(rows, &duplicate, &conflict, &ord)
		if err != nil {
			return nil, c.dbError("error enqueueing intents", err)
		}
		c.observe(intent.Effect, duplicate, conflict)
		if conflict {
			return nil, &KeyReusedError{Existing: intent}
		}
		results[ord] = &EnqueueResult{Duplicate: duplicate, Intent: intent}
	}
	if err := rows.Err(); err != nil {
		return nil, c.dbError("error enqueueing intents", err)
	}
	return results, nil
}

// dbError maps constraint violations that input checks should have caught
// (for example a jsonb the database refuses) to invalid_args, and wraps the rest.
func (c *Client) dbError(msg string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "22"), pgErr.Code == "54001":
			// Class 22 is data exceptions: jsonb refused the arguments
			// (invalid text, a number out of range such as 1e1000000, an
			// untranslatable character); 54001 is statement_too_complex,
			// which very deep nesting raises. The input is at fault.
			return &Error{Code: CodeInvalidArgs, Field: "args", Message: pgErr.Message}
		case pgErr.Code == "23514":
			return &Error{Code: CodeInvalidArgs, Message: "refused by constraint " + pgErr.ConstraintName}
		}
	}
	return fmt.Errorf("%s: %w", msg, err)
}

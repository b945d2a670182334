// Package noop is the sandbox's effect that touches no provider. It can act as
// any guarantee, can be told to fail, to be slow, or to hang just before or
// just after it records its effect (so a test can kill the process at either
// point), and records every execution in its own table, outside the worker's
// transaction, the way a provider would, so tests can count effects.
package noop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/migrations"
)

// NameDefault is the name of the noop effect when Config.Name is empty.
const NameDefault = "noop"

// Config configures a noop effect.
type Config struct {
	// DedupeWindow is the window a deduplicated noop claims to keep keys for
	// (it really keeps them forever). Defaults to effects.DedupeWindowDefault.
	DedupeWindow time.Duration

	// Guarantee is the guarantee the effect claims and behaves as: a
	// deduplicated noop performs one effect per provider key, a reconcilable
	// one answers Lookup, an at-most-once one records every execution.
	// Defaults to effects.GuaranteeDeduplicated.
	Guarantee effects.Guarantee

	// Logger receives a warning when the effect hangs, which tests wait for.
	// Defaults to a logger that discards.
	Logger *slog.Logger

	// Name is the effect's name. Defaults to NameDefault.
	Name string

	// Pool is where effects are recorded (table outbox_noop_effect in Schema).
	// Nil records nothing, which is what benchmarks want.
	Pool *pgxpool.Pool

	// Schema holds the outbox_noop_effect table. Defaults to "outbox".
	Schema string
}

// Effect is the noop effect.
type Effect struct {
	dedupeWindow time.Duration
	guarantee    effects.Guarantee
	logger       *slog.Logger
	name         string
	pool         *pgxpool.Pool
	table        string
}

// New returns a noop effect.
func New(config *Config) (*Effect, error) {
	if config == nil {
		config = &Config{}
	}
	e := &Effect{
		dedupeWindow: config.DedupeWindow,
		guarantee:    config.Guarantee,
		logger:       config.Logger,
		name:         config.Name,
		pool:         config.Pool,
	}
	if e.dedupeWindow == 0 {
		e.dedupeWindow = effects.DedupeWindowDefault
	}
	if e.guarantee == "" {
		e.guarantee = effects.GuaranteeDeduplicated
	}
	if !e.guarantee.Valid() {
		return nil, fmt.Errorf("noop: unknown guarantee %q", e.guarantee)
	}
	if e.logger == nil {
		e.logger = slog.New(slog.DiscardHandler)
	}
	if e.name == "" {
		e.name = NameDefault
	}
	schema := config.Schema
	if schema == "" {
		schema = migrations.SchemaDefault
	}
	e.table = pgx.Identifier{schema, "outbox_noop_effect"}.Sanitize()
	return e, nil
}

// Name implements effects.Effect.
func (e *Effect) Name() string { return e.name }

// DedupeWindow implements effects.DedupeWindower.
func (e *Effect) DedupeWindow() time.Duration { return e.dedupeWindow }

// Guarantee implements effects.Effect.
func (e *Effect) Guarantee() effects.Guarantee { return e.guarantee }

// Control is the optional "_noop" field of a noop intent's arguments, which
// tells the effect how to misbehave. Every other field is accepted as is.
type Control struct {
	// Fail makes the attempt fail with this class: "not_sent" and "permanent"
	// fail before the effect is recorded; "ambiguous" records the effect and
	// then fails, like a 5xx or a reset after the provider acted.
	Fail effects.Class `json:"fail,omitempty"`

	// FailAttempts limits Fail to attempts 1..FailAttempts; 0 means every attempt.
	FailAttempts int `json:"fail_attempts,omitempty"`

	// RetryAfterSeconds, with Fail "not_sent", is the Retry-After the
	// failure carries, like a provider's 429.
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`

	// Hang blocks the attempt until its context ends, "before" or "after" the
	// effect is recorded.
	Hang string `json:"hang,omitempty"`

	// HangAttempts limits Hang to attempts 1..HangAttempts; 0 means 1, so a
	// restarted process does not hang again.
	HangAttempts int `json:"hang_attempts,omitempty"`

	// Sleep delays the attempt by this duration (Go syntax: "200ms") after the
	// effect is recorded, like a provider that acts and then answers slowly.
	Sleep string `json:"sleep,omitempty"`

	sleep time.Duration
}

func parseControl(args json.RawMessage) (*Control, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(args))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return nil, &effects.ArgError{Message: "must be a JSON object"}
	}
	raw, ok := fields["_noop"]
	if !ok {
		return &Control{}, nil
	}
	var c Control
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, &effects.ArgError{Field: "_noop", Message: err.Error()}
	}
	switch c.Fail {
	case "", effects.ClassNotSent, effects.ClassPermanent, effects.ClassAmbiguous:
	default:
		return nil, &effects.ArgError{Field: "_noop.fail", Message: "must be not_sent, permanent or ambiguous"}
	}
	switch c.Hang {
	case "", "before", "after":
	default:
		return nil, &effects.ArgError{Field: "_noop.hang", Message: "must be before or after"}
	}
	if c.Sleep != "" {
		d, err := time.ParseDuration(c.Sleep)
		if err != nil || d < 0 {
			return nil, &effects.ArgError{Field: "_noop.sleep", Message: "must be a duration such as 200ms"}
		}
		c.sleep = d
	}
	if c.RetryAfterSeconds < 0 {
		return nil, &effects.ArgError{Field: "_noop.retry_after_seconds", Message: "must be 0 or more"}
	}
	if c.FailAttempts < 0 {
		return nil, &effects.ArgError{Field: "_noop.fail_attempts", Message: "must be 0 or more"}
	}
	if c.HangAttempts < 0 {
		return nil, &effects.ArgError{Field: "_noop.hang_attempts", Message: "must be 0 or more"}
	}
	return &c, nil
}

// ValidateArgs implements effects.Effect: any JSON object, with a valid
// "_noop" control field if present.
func (e *Effect) ValidateArgs(args json.RawMessage) error {
	_, err := parseControl(args)
	return err
}

// Execute implements effects.Effect.
func (e *Effect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	c, err := parseControl(req.Args)
	if err != nil {
		return nil, effects.Permanent("invalid_args", err)
	}
	failing := c.Fail != "" && (c.FailAttempts == 0 || req.Attempt <= c.FailAttempts)
	hangAttempts := max(c.HangAttempts, 1)
	hanging := c.Hang != "" && req.Attempt <= hangAttempts

	if failing && c.Fail != effects.ClassAmbiguous {
		if c.Fail == effects.ClassNotSent {
			err := errors.New("noop: told to fail before sending")
			if c.RetryAfterSeconds > 0 {
				return nil, effects.NotSentRetryAfter("noop_not_sent", err, time.Duration(c.RetryAfterSeconds)*time.Second)
			}
			return nil, effects.NotSent("noop_not_sent", err)
		}
		return nil, effects.Permanent("noop_refused", errors.New("noop: told to refuse"))
	}
	if hanging && c.Hang == "before" {
		return nil, e.hang(ctx, req, "before")
	}

	result, err := e.record(ctx, req.ProviderKey)
	if err != nil {
		// The provider's own storage failed; whether it kept the row is
		// unknown to the caller.
		return nil, effects.Ambiguous("noop_record_failed", err)
	}

	if hanging && c.Hang == "after" {
		return nil, e.hang(ctx, req, "after")
	}
	if c.sleep > 0 {
		select {
		case <-time.After(c.sleep):
		case <-ctx.Done():
			return nil, effects.Ambiguous("timeout", fmt.Errorf("noop: answer lost after acting: %w", ctx.Err()))
		}
	}
	if failing {
		return nil, effects.Ambiguous("noop_ambiguous", errors.New("noop: told to fail after acting"))
	}
	return result, nil
}

func (e *Effect) hang(ctx context.Context, req *effects.Request, point string) error {
	e.logger.WarnContext(ctx, "noop effect hanging",
		slog.String("point", point), slog.Int64("intent_id", req.IntentID), slog.Int("attempt", req.Attempt))
	<-ctx.Done()
	// Even a hang before recording is ambiguous: a real client cannot tell
	// a timeout before the provider acted from one after.
	return effects.Ambiguous("timeout", ctx.Err())
}

// record performs "the effect": a row in outbox_noop_effect. A deduplicated
// noop keeps the first row per provider key and replays its result.
func (e *Effect) record(ctx context.Context, providerKey string) (json.RawMessage, error) {
	if e.pool == nil {
		return json.RawMessage(`{"noop":true}`), nil
	}
	dedupe := e.guarantee == effects.GuaranteeDeduplicated
	var result json.RawMessage
	if dedupe {
		err := e.pool.QueryRow(ctx, `
			WITH ins AS (
				INSERT INTO `+e.table+` (provider_key, deduplicated, result)
				VALUES ($1, true, jsonb_build_object('provider_key', $1::text, 'noop_at', now()))
				ON CONFLICT (provider_key) WHERE deduplicated DO NOTHING
				RETURNING result
			)
			SELECT result FROM ins
			UNION ALL
			SELECT result FROM `+e.table+` WHERE provider_key = $1 AND deduplicated
			LIMIT 1`, providerKey).Scan(&result)
		if errors.Is(err, pgx.ErrNoRows) {
			// A concurrent first request with this key has not committed:
			// Stripe answers 409 idempotency_key_in_use here, "not processed".
			return nil, effects.NotSent("idempotency_key_in_use", errors.New("noop: concurrent request with the same key"))
		}
		return result, err
	}
	err := e.pool.QueryRow(ctx, `
		INSERT INTO `+e.table+` (provider_key, deduplicated, result)
		VALUES ($1, false, jsonb_build_object('provider_key', $1::text, 'noop_at', now()))
		RETURNING result`, providerKey).Scan(&result)
	return result, err
}

// Lookup implements effects.Reconciler.
func (e *Effect) Lookup(ctx context.Context, providerKey string) (json.RawMessage, bool, error) {
	if e.pool == nil {
		return nil, false, nil
	}
	var result json.RawMessage
	err := e.pool.QueryRow(ctx, `SELECT result FROM `+e.table+` WHERE provider_key = $1 ORDER BY id LIMIT 1`, providerKey).Scan(&result)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("noop: error looking up effect: %w", err)
	}
	return result, true, nil
}

// Count returns how many effects were performed for providerKey, or in all
// when providerKey is empty. It is for tests.
func Count(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, schema, providerKey string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "outbox_noop_effect"}.Sanitize()+
		` WHERE $1 = '' OR provider_key = $1`, providerKey).Scan(&n)
	return n, err
}

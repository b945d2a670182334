package outbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

// Get returns the intent (namespace, key), or ErrNotFound.
func (c *Client) Get(ctx context.Context, namespace, key string) (*Intent, error) {
	return c.get(ctx, c.pool, namespace, key)
}

func (c *Client) get(ctx context.Context, q intentdb.Querier, namespace, key string) (*Intent, error) {
	if namespace == "" {
		namespace = NamespaceDefault
	}
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	row, err := c.queries.Get(ctx, q, namespace, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &Error{Code: CodeNotFound, Message: "no intent with this key"}
	}
	if err != nil {
		return nil, fmt.Errorf("error reading intent: %w", err)
	}
	return intentFromRow(row), nil
}

// ListLimitDefault and ListLimitMax bound List's page size.
const (
	ListLimitDefault = 100
	ListLimitMax     = 1000
)

// ListParams filters List.
type ListParams struct {
	// Cursor continues a previous listing (ListResult.NextCursor). Defaults
	// to the newest intents.
	Cursor string
	// Effect keeps only intents of this effect. Defaults to all.
	Effect string
	// Limit is the page size, at most ListLimitMax. Defaults to
	// ListLimitDefault.
	Limit int
	// Namespace is the tenant. Defaults to NamespaceDefault.
	Namespace string
	// States keeps only intents in these states. Defaults to all.
	States []State
}

// ListResult is a page of intents, newest first.
type ListResult struct {
	// Intents is the page.
	Intents []*Intent
	// NextCursor fetches the next page; empty on the last one.
	NextCursor string
}

// List returns intents of a namespace, newest first, a page at a time.
func (c *Client) List(ctx context.Context, params *ListParams) (*ListResult, error) {
	if params == nil {
		params = &ListParams{}
	}
	namespace := params.Namespace
	if namespace == "" {
		namespace = NamespaceDefault
	}
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	limit := params.Limit
	switch {
	case limit == 0:
		limit = ListLimitDefault
	case limit < 0 || limit > ListLimitMax:
		return nil, &Error{Code: CodeInvalidArgs, Field: "limit", Message: "must be between 1 and " + strconv.Itoa(ListLimitMax)}
	}
	states := make([]string, 0, len(params.States))
	for _, s := range params.States {
		if !s.Valid() {
			return nil, &Error{Code: CodeInvalidArgs, Field: "state", Message: fmt.Sprintf("unknown state %q", s)}
		}
		states = append(states, string(s))
	}
	var before int64
	if params.Cursor != "" {
		var err error
		if before, err = decodeCursor(params.Cursor); err != nil {
			return nil, err
		}
	}

	// One row more than the page tells whether there is a next page.
	rows, err := c.queries.List(ctx, c.pool, &intentdb.ListParams{
		BeforeID: before, Effect: params.Effect, Limit: limit + 1, Namespace: namespace, States: states,
	})
	if err != nil {
		return nil, fmt.Errorf("error listing intents: %w", err)
	}
	res := &ListResult{Intents: make([]*Intent, 0, len(rows))}
	for _, row := range rows {
		res.Intents = append(res.Intents, intentFromRow(row))
	}
	if len(res.Intents) > limit {
		res.Intents = res.Intents[:limit]
		res.NextCursor = encodeCursor(res.Intents[limit-1].ID)
	}
	return res, nil
}

// Cursors are opaque to callers; today they hold the last id seen.
func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("id:" + strconv.FormatInt(id, 10)))
}

func decodeCursor(cursor string) (int64, error) {
	bad := &Error{Code: CodeInvalidArgs, Field: "cursor", Message: "is not a cursor returned by a listing"}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, bad
	}
	s, ok := strings.CutPrefix(string(raw), "id:")
	if !ok {
		return 0, bad
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, bad
	}
	return id, nil
}

// Wait blocks until the intent (namespace, key) is terminal and returns it.
// Approval is the exception, since a person must act: Wait also returns when
// the intent enters awaiting_approval, and a wait that begins while it
// awaits approval returns when that ends (approved, so pending; or denied,
// expired or cancelled). It is woken by the notification each state change
// fires, on one LISTEN connection that all of the client's waits share, and
// never polls. When ctx ends first, it returns the intent as it last read
// it together with ctx's error.
func (c *Client) Wait(ctx context.Context, namespace, key string) (*Intent, error) {
	// Most waits are for intents that are already terminal.
	intent, err := c.Get(ctx, namespace, key)
	if err != nil || intent.State.Terminal() {
		return intent, err
	}
	awaiting := intent.State == StateAwaitingApproval
	done := func(i *Intent) bool {
		return i.State.Terminal() || (i.State == StateAwaitingApproval) != awaiting
	}

	sub, ready, unsubscribe := c.notifier.subscribe(intent.ID)
	defer unsubscribe()
	select {
	case <-ready:
	case <-ctx.Done():
		return intent, ctx.Err()
	}
	for {
		// Read again now that we listen (a change between the first read and
		// LISTEN would otherwise be missed), and after every wake-up.
		if intent, err = c.reread(ctx, c.pool, intent); err != nil || done(intent) {
			return intent, err
		}
		select {
		case <-sub.wake:
		case <-ctx.Done():
			return intent, ctx.Err()
		}
	}
}

// reread reads intent again. On failure it returns the intent as last read,
// with ctx's error when ctx ended, so that a waiter always has something to
// show.
func (c *Client) reread(ctx context.Context, q intentdb.Querier, last *Intent) (*Intent, error) {
	intent, err := c.get(ctx, q, last.Namespace, last.Key)
	if err != nil {
		if ctx.Err() != nil {
			return last, ctx.Err()
		}
		return last, err
	}
	return intent, nil
}

// CancelParams is a cancel of a pending intent.
type CancelParams struct {
	// By names who cancels, for the record (ResolvedBy): never a secret.
	// Optional; at most 200 characters.
	By string
	// Key is the intent's key.
	Key string
	// Namespace is the tenant. Defaults to NamespaceDefault.
	Namespace string
	// Note says why, for the record. Optional; at most 1000 characters.
	Note string
}

// Cancel moves a pending intent to cancelled, recording who did it. It
// returns ErrNotCancellable once an attempt may have started, whatever
// River's job shows: when the intent is no longer pending, when its job is
// running or ran an attempt that recorded no outcome (a deduplicated
// effect's attempt killed mid-call), or when an earlier attempt may have
// reached the provider. It returns ErrNotFound when there is no such intent.
func (c *Client) Cancel(ctx context.Context, params *CancelParams) (*Intent, error) {
	if params == nil {
		return nil, &Error{Code: CodeInvalidArgs, Message: "params must not be nil"}
	}
	namespace, key := params.Namespace, params.Key
	if namespace == "" {
		namespace = NamespaceDefault
	}
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := validateRecord(params.By, params.Note); err != nil {
		return nil, err
	}
	row, err := c.queries.Cancel(ctx, c.pool, namespace, key, params.By, params.Note)
	if errors.Is(err, pgx.ErrNoRows) {
		current, err := c.Get(ctx, namespace, key)
		if err != nil {
			return nil, err
		}
		msg := "intent is " + string(current.State)
		switch {
		case current.State == StatePending && current.MaybeSent:
			msg = "an earlier attempt may have reached the provider"
		case current.State == StatePending:
			msg = "an attempt may have started: its River job is running, or ran an attempt that recorded no outcome"
		}
		return nil, &Error{Code: CodeNotCancellable, Message: msg}
	}
	if err != nil {
		return nil, fmt.Errorf("error cancelling intent: %w", err)
	}
	c.logger.InfoContext(ctx, "intent cancelled", "namespace", namespace, "key", key, "intent_id", row.ID, "by", params.By)
	return intentFromRow(row), nil
}

// validateRecord checks a cancel's or resolution's actor and note.
func validateRecord(by, note string) error {
	if len(by) > 200 || !utf8.ValidString(by) {
		return &Error{Code: CodeInvalidArgs, Field: "by", Message: "must be valid UTF-8 of at most 200 bytes"}
	}
	if len(note) > 1000 || !utf8.ValidString(note) {
		return &Error{Code: CodeInvalidArgs, Field: "note", Message: "must be valid UTF-8 of at most 1000 characters"}
	}
	return nil
}

// Outcome is an operator's decision about an unknown intent.
type Outcome string

const (
	// OutcomeSucceeded records that the effect did happen.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed records that it did not, and must not be sent again.
	OutcomeFailed Outcome = "failed"
	// OutcomeRetry sends it again, knowingly.
	OutcomeRetry Outcome = "retry"
)

// ResolveParams is an operator's resolution of an unknown intent.
type ResolveParams struct {
	// Key is the intent's key.
	Key string
	// By names who decided, for the record (ResolvedBy): never a secret.
	// Optional; at most 200 characters.
	By string
	// Namespace is the tenant. Defaults to NamespaceDefault.
	Namespace string
	// Note says why, for the record.
	Note string
	// Outcome is the decision.
	Outcome Outcome
}

// Resolve moves an unknown intent to succeeded, failed, or back to pending
// for another attempt (retry). It returns ErrNotUnknown for any other state.
func (c *Client) Resolve(ctx context.Context, params *ResolveParams) (*Intent, error) {
	if params == nil {
		return nil, &Error{Code: CodeInvalidArgs, Message: "params must not be nil"}
	}
	namespace := params.Namespace
	if namespace == "" {
		namespace = NamespaceDefault
	}
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := ValidateKey(params.Key); err != nil {
		return nil, err
	}
	var state State
	switch params.Outcome {
	case OutcomeSucceeded:
		state = StateSucceeded
	case OutcomeFailed:
		state = StateFailed
	case OutcomeRetry:
		state = StatePending
	default:
		return nil, &Error{Code: CodeInvalidArgs, Field: "outcome", Message: "must be succeeded, failed or retry"}
	}
	if err := validateRecord(params.By, params.Note); err != nil {
		return nil, err
	}
	row, err := c.queries.Resolve(ctx, c.pool, namespace, params.Key, string(state), params.Note, params.By)
	if errors.Is(err, pgx.ErrNoRows) {
		current, err := c.Get(ctx, namespace, params.Key)
		if err != nil {
			return nil, err
		}
		return nil, &Error{Code: CodeNotUnknown, Message: "intent is " + string(current.State)}
	}
	if err != nil {
		return nil, fmt.Errorf("error resolving intent: %w", err)
	}
	c.logger.InfoContext(ctx, "intent resolved", "namespace", namespace, "key", params.Key, "intent_id", row.ID,
		"outcome", string(params.Outcome), "by", params.By)
	return intentFromRow(row), nil
}

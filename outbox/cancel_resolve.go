package outbox

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

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
//
// An intent whose provider holds the work as a task of its own (an MCP
// upstream that answered with a task) is not cancelled either: the cancel
// is recorded and passed to the provider by the attempt polling the task,
// and Cancel returns ErrCancelRequested. The intent then ends by what the
// provider reports.
func (c *Client) Cancel(ctx context.Context, params *CancelParams) (*Intent, error) {
	// One statement, and a read of the intent only to say why it was
	// refused: the pool runs each in a transaction of its own.
	return c.CancelTx(ctx, c.pool, params)
}

// CancelTx is Cancel in the caller's transaction: the intent is cancelled
// when tx commits, and stays as it was if tx rolls back. Until tx ends the
// intent's row and its River job's stay locked, so no attempt starts
// meanwhile: keep tx short. It does not commit tx.
func (c *Client) CancelTx(ctx context.Context, tx Executor, params *CancelParams) (*Intent, error) {
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
	row, err := c.queries.Cancel(ctx, tx, namespace, key, params.By, params.Note)
	if errors.Is(err, pgx.ErrNoRows) {
		// The provider may hold the work as a task of its own (an MCP
		// upstream's, recorded as the intent's checkpoint): the intent
		// cannot be cancelled here, but the provider can be asked to stop.
		id, err := c.queries.RequestCancel(ctx, tx, namespace, key, params.By, params.Note)
		if err == nil {
			c.logger.InfoContext(ctx, "intent cancel passed to its provider", "namespace", namespace, "key", key, "intent_id", id, "by", params.By)
			return nil, &Error{Code: CodeCancelRequested, Message: "the provider holds this intent's work as a task: the cancel was passed to it, and the intent ends by what it reports (cancelled if it stopped the work, its result if the work ended first)"}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("error cancelling intent: %w", err)
		}
		current, err := c.GetTx(ctx, tx, namespace, key)
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
	return c.ResolveTx(ctx, c.pool, params)
}

// ResolveTx is Resolve in the caller's transaction: the resolution holds
// when tx commits, and the intent stays unknown if tx rolls back. It does
// not commit tx.
func (c *Client) ResolveTx(ctx context.Context, tx Executor, params *ResolveParams) (*Intent, error) {
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
	row, err := c.queries.Resolve(ctx, tx, namespace, params.Key, string(state), params.Note, params.By)
	if errors.Is(err, pgx.ErrNoRows) {
		current, err := c.GetTx(ctx, tx, namespace, params.Key)
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

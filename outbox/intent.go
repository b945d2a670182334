package outbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/outbox-dev/outbox/internal/autokey"
	"github.com/outbox-dev/outbox/internal/intentdb"
)

// State is an intent's state.
type State string

const (
	// StateAwaitingApproval means an approval rule matched, or the caller
	// asked for approval: the intent has no River job until an operator
	// approves it (Client.Approve) with its ArgsSHA256.
	StateAwaitingApproval State = "awaiting_approval"
	// StatePending is recorded and waiting for a worker, or for a retry after
	// an attempt that surely did not reach the provider.
	StatePending State = "pending"
	// StateRunning means an attempt holds a lease; the provider may have been
	// called.
	StateRunning State = "running"
	// StateSucceeded means the provider confirmed the effect.
	StateSucceeded State = "succeeded"
	// StateFailed is a definitive failure.
	StateFailed State = "failed"
	// StateUnknown means an attempt may have reached a provider that can
	// neither dedupe nor be asked, and its outcome was lost. Only an operator
	// moves it on (Resolve).
	StateUnknown State = "unknown"
	// StateCancelled means cancelled before any attempt could have reached the
	// provider.
	StateCancelled State = "cancelled"
)

// States returns every state, in the order of an intent's life: awaiting
// approval, pending, running, then the terminal ones (succeeded, failed,
// unknown, cancelled). As River's rivertype.JobStates, it is a new slice
// each call, so a caller may keep or change it.
func States() []State {
	return []State{
		StateAwaitingApproval, StatePending, StateRunning,
		StateSucceeded, StateFailed, StateUnknown, StateCancelled,
	}
}

// Terminal reports whether s is final for workers.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateUnknown, StateCancelled:
		return true
	}
	return false
}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	return s == StateAwaitingApproval || s == StatePending || s == StateRunning || s.Terminal()
}

// KeySource says where an intent's key came from.
type KeySource string

const (
	// KeySourceExplicit is a key the caller gave.
	KeySourceExplicit KeySource = "explicit"
	// KeySourceAuto is a key derived from the call itself (MCP's fallback).
	KeySourceAuto KeySource = "auto"
	// KeySourceModelConfirmed is a model's key for an action identical to
	// one recorded moments before under another key, which the model
	// confirmed is a new action (new_action: true).
	KeySourceModelConfirmed KeySource = "model_confirmed"
)

// IntentError is the error recorded on a failed (or unknown) intent.
type IntentError struct {
	// Code is a stable snake_case code, such as "card_declined".
	Code string `json:"code"`
	// Message is a human-readable explanation, free of secrets.
	Message string `json:"message"`
}

// Intent is one logical action, identified by (Namespace, Key).
type Intent struct {
	// ID is the intent's id; every enqueue of one key answers with the same.
	ID int64 `json:"id"`
	// Namespace is the tenant the intent belongs to.
	Namespace string `json:"namespace"`
	// Key is the caller's idempotency key.
	Key string `json:"key"`
	// Effect is the effect's name.
	Effect string `json:"effect"`
	// Args are the effect's arguments, a JSON object.
	Args json.RawMessage `json:"args"`
	// ArgsSHA256 is the hex SHA-256 of Args in canonical form (RFC 8785):
	// what an approval names, so that it releases exactly these arguments.
	ArgsSHA256 string `json:"args_sha256"`
	// State is where the intent stands.
	State State `json:"state"`
	// Attempts counts the attempts that claimed the intent.
	Attempts int `json:"attempts"`
	// Result is the provider's answer once succeeded.
	Result json.RawMessage `json:"result"`
	// Error is set on failed intents, and on others after a failed attempt.
	Error *IntentError `json:"error"`
	// ProviderKey is the key sent to the provider, derived from
	// (Namespace, Key) and free of both.
	ProviderKey string `json:"provider_key"`
	// RequestedBy optionally names who asked (an agent, a user), as the
	// client said.
	RequestedBy *string `json:"requested_by"`
	// EnqueuedBy names who enqueued it, from the credentials the enqueue
	// came with ("api:" and an API token's fingerprint, "cli:" and the
	// command line's user); absent for an intent enqueued through the
	// library or SQL.
	EnqueuedBy *string `json:"enqueued_by,omitempty"`
	// KeySource says whether the key was given or derived.
	KeySource KeySource `json:"key_source"`
	// CreatedAt is when the intent was first enqueued.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is the last state change.
	UpdatedAt time.Time `json:"updated_at"`
	// CompletedAt is when the intent became terminal.
	CompletedAt *time.Time `json:"completed_at"`
	// ResolvedBy names who cancelled the intent or resolved it by hand (an
	// API token's fingerprint, "cli:" and the command line's user), for the
	// record; absent when nobody did.
	ResolvedBy *string `json:"resolved_by,omitempty"`
	// ResolutionNote is the note given with the cancel or resolution.
	ResolutionNote *string `json:"resolution_note,omitempty"`
	// ResolvedAt is when it was cancelled or resolved by hand.
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	// ApprovalRule is why the intent needed approval: the rule in force
	// (SetApprovalRules) that matched, as written, or "requested" when its
	// caller asked; absent when it needed none.
	ApprovalRule *string `json:"approval_rule,omitempty"`
	// ApprovedBy names who approved it (an API token's fingerprint, "cli:"
	// and the command line's user).
	ApprovedBy *string `json:"approved_by,omitempty"`
	// ApprovedAt is when it was approved.
	ApprovedAt *time.Time `json:"approved_at,omitempty"`
	// DeniedBy names who denied it.
	DeniedBy *string `json:"denied_by,omitempty"`
	// DeniedAt is when it was denied.
	DeniedAt *time.Time `json:"denied_at,omitempty"`
	// ApprovalNote is the note given with the approval or denial.
	ApprovalNote *string `json:"approval_note,omitempty"`

	// JobID is the River job that runs the intent's attempts, or ran its
	// last: the batch job (JobKind "outbox_intent_batch") that ran its first
	// attempt, if that attempt ended it, else the intent's own job
	// ("outbox_intent"), to which a batch hands an intent its first attempt
	// did not end; the reconciler replaces a job that was lost. Open it in
	// River UI (its job page). Earlier jobs are not kept: a batch that
	// handed the intent over lists it in its output (handed_over_to).
	// Null until dispatched.
	JobID *int64 `json:"job_id"`
	// JobKind is JobID's River kind: "outbox_intent_batch" for a batch of
	// first attempts, "outbox_intent" for a job of the intent's own.
	// Filled by Get, Wait and List (it is read from River's table); absent
	// until dispatched, after River deleted the job (River keeps finished
	// jobs for a day by default), and in the answers of Enqueue, Cancel,
	// Resolve, Approve and Deny.
	JobKind *string `json:"job_kind,omitempty"`
	// LeaseExpiresAt is when the running attempt's lease ends.
	LeaseExpiresAt *time.Time `json:"-"`
	// MaybeSent reports whether any attempt may have reached the provider.
	MaybeSent bool `json:"-"`
}

// intentFromRow is the public form of a row.
func intentFromRow(r *intentdb.Row) *Intent {
	return &Intent{
		ID:             r.ID,
		Namespace:      r.Namespace,
		Key:            r.Key,
		Effect:         r.Effect,
		Args:           r.Args,
		ArgsSHA256:     ArgsSHA256(r.Args),
		State:          State(r.State),
		Attempts:       r.Attempt,
		Result:         r.Result,
		Error:          (*IntentError)(r.Error),
		ProviderKey:    r.ProviderKey,
		RequestedBy:    r.RequestedBy,
		EnqueuedBy:     r.EnqueuedBy,
		KeySource:      KeySource(r.KeySource),
		CreatedAt:      r.CreatedAt,
		UpdatedAt:      r.UpdatedAt,
		CompletedAt:    r.CompletedAt,
		JobID:          r.JobID,
		JobKind:        r.JobKind,
		LeaseExpiresAt: r.LeaseExpiresAt,
		MaybeSent:      r.MaybeSent,
		ResolvedBy:     r.ResolvedBy,
		ResolutionNote: r.ResolutionNote,
		ResolvedAt:     r.ResolvedAt,
		ApprovalRule:   r.ApprovalRule,
		ApprovedBy:     r.ApprovedBy,
		ApprovedAt:     r.ApprovedAt,
		DeniedBy:       r.DeniedBy,
		DeniedAt:       r.DeniedAt,
		ApprovalNote:   r.ApprovalNote,
	}
}

// ArgsSHA256 returns the hex SHA-256 of args in canonical form (RFC 8785,
// the form automatic keys hash), so that key order, white space and the
// spelling of numbers do not change it. Arguments without a canonical form
// (a number beyond IEEE 754 doubles, recorded through SQL) are hashed as
// PostgreSQL's jsonb prints them, which is as stable.
func ArgsSHA256(args json.RawMessage) string {
	b, err := autokey.Canonicalize(args)
	if err != nil {
		b = args
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

package outbox

import (
	"encoding/json"
	"time"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

// State is an intent's state.
type State string

const (
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
	return s == StatePending || s == StateRunning || s.Terminal()
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
	// RequestedBy optionally names who asked (an agent, a user).
	RequestedBy *string `json:"requested_by"`
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

	// JobID is the River job executing the intent, once dispatched.
	JobID *int64 `json:"-"`
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
		State:          State(r.State),
		Attempts:       r.Attempt,
		Result:         r.Result,
		Error:          (*IntentError)(r.Error),
		ProviderKey:    r.ProviderKey,
		RequestedBy:    r.RequestedBy,
		KeySource:      KeySource(r.KeySource),
		CreatedAt:      r.CreatedAt,
		UpdatedAt:      r.UpdatedAt,
		CompletedAt:    r.CompletedAt,
		JobID:          r.JobID,
		LeaseExpiresAt: r.LeaseExpiresAt,
		MaybeSent:      r.MaybeSent,
		ResolvedBy:     r.ResolvedBy,
		ResolutionNote: r.ResolutionNote,
		ResolvedAt:     r.ResolvedAt,
	}
}

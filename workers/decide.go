package workers

import (
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/outbox"
)

// Step is where in an attempt a decision is taken.
type Step int

const (
	// StepStart is before anything is sent: the attempt may finish at once,
	// look the intent up at the provider, or send.
	StepStart Step = iota
	// StepLookedUp is after a reconcilable effect's look-up.
	StepLookedUp
	// StepCalled is after the provider call.
	StepCalled
)

// Action is what an attempt does next.
type Action int

const (
	// ActionFinish records Decision.State (fenced) and ends the attempt.
	ActionFinish Action = iota
	// ActionLookup asks the provider, by provider key, whether the effect
	// exists (reconcilable effects after a lost outcome).
	ActionLookup
	// ActionSend calls the provider.
	ActionSend
)

// Situation is what an attempt knows at a decision point. Every field is a
// fact read from the intent, the job or the provider's answer; Decide is the
// only place that turns facts into a next state.
type Situation struct {
	// Step is where the attempt stands.
	Step Step
	// Guarantee is the effect's guarantee for the intent's arguments.
	Guarantee effects.Guarantee
	// Lost is true when an earlier attempt's outcome was lost (it claimed
	// the intent, or ran its River attempt, and recorded nothing), or when
	// an at-most-once intent is marked as possibly sent.
	Lost bool
	// MaybeSent is true when any earlier attempt may have reached the
	// provider.
	MaybeSent bool
	// PastWindow is true when the intent is older than the provider's
	// dedupe window (deduplicated effects).
	PastWindow bool
	// Exhausted is true when an earlier attempt was the last one allowed
	// and died: this attempt may not send.
	Exhausted bool
	// Last is true when this attempt is the last one allowed.
	Last bool
	// DeclarationChanged is true when an earlier attempt was sent under
	// another declaration of the effect (effects.Declarer) than the one in
	// force.
	DeclarationChanged bool

	// Found is the look-up's answer (StepLookedUp).
	Found bool
	// LookupFailed is true when the look-up itself failed (StepLookedUp).
	LookupFailed bool

	// Class is the call's error class, empty when the call succeeded
	// (StepCalled).
	Class effects.Class
}

// Decision is what an attempt does next.
type Decision struct {
	// Action is the next step.
	Action Action
	// State is the state to record (ActionFinish).
	State outbox.State
	// Code is the error code to record, when the table decides it; empty
	// means the provider's own code (or no error, for succeeded).
	Code string
	// Outcome labels the attempt in outbox_effect_attempts_total.
	Outcome string
	// MaybeSent records that an attempt may have reached the provider.
	MaybeSent bool
	// KeepLease keeps a running intent's lease: a request that may still be
	// in flight must not be looked up before its lease ends.
	KeepLease bool
	// Retry returns an error to River after recording, so that River retries
	// with its backoff.
	Retry bool
}

// Decide is the intent state machine, as one pure function. Every row below
// is covered by TestDecide.
//
// At the start of an attempt (StepStart), in this order:
//
//	exhausted, nothing may have been sent         -> failed  (attempts_exhausted)
//	exhausted, something may have been sent       -> unknown (attempts_exhausted)
//	maybe sent, another declaration, reconcilable -> look up first
//	maybe sent, another declaration in force       -> unknown (declaration_changed)
//	lost outcome, at_most_once                    -> unknown (outcome_lost)
//	lost outcome or maybe sent, reconcilable      -> look up
//	maybe sent, deduplicated, past the window     -> unknown (dedupe_window_passed)
//	otherwise                                     -> send
//
// After a look-up (StepLookedUp):
//
//	look-up failed -> running, maybe sent, lease released, retry (lookup_failed)
//	found          -> succeeded (reconciled)
//	not found, another declaration in force -> unknown (declaration_changed)
//	not found      -> send again, with the same provider key
//
// After the call (StepCalled):
//
//	success                                -> succeeded
//	permanent                              -> failed
//	not sent, attempts left                -> pending, retry
//	not sent, last attempt                 -> failed, or unknown if an earlier attempt may have been sent (attempts_exhausted)
//	ambiguous, at_most_once                -> unknown
//	ambiguous, reconcilable, attempts left -> running, lease kept, retry (looked up once the lease ends)
//	ambiguous, deduplicated, attempts left -> pending, retry with the same provider key
//	ambiguous, last attempt                -> unknown
//
// Every ambiguous outcome records that the attempt may have reached the
// provider.
func Decide(s Situation) Decision {
	mayHaveSent := s.MaybeSent || s.Lost
	exhausted := func(outcome string) Decision {
		if mayHaveSent {
			return Decision{State: outbox.StateUnknown, Code: CodeAttemptsExhausted, Outcome: outcome, MaybeSent: true}
		}
		return Decision{State: outbox.StateFailed, Code: CodeAttemptsExhausted, Outcome: outcome}
	}
	switch s.Step {
	case StepStart:
		switch {
		case s.Exhausted:
			return exhausted("exhausted")
		case mayHaveSent && s.DeclarationChanged && s.Guarantee == effects.GuaranteeReconcilable:
			// A look-up can still tell: found means the earlier request
			// acted, and nothing is sent again; not found ends unknown
			// (below) rather than sending another request under the key.
			return Decision{Action: ActionLookup}
		case mayHaveSent && s.DeclarationChanged:
			// The same provider key with another request: a provider
			// that dedupes may answer the old request's result, or refuse,
			// and a look-up may look for the wrong thing.
			return Decision{State: outbox.StateUnknown, Code: CodeDeclarationChanged, Outcome: "unknown", MaybeSent: true}
		case s.Lost && s.Guarantee == effects.GuaranteeAtMostOnce:
			return Decision{State: outbox.StateUnknown, Code: CodeOutcomeLost, Outcome: "unknown", MaybeSent: true}
		case (s.Lost || s.MaybeSent) && s.Guarantee == effects.GuaranteeReconcilable:
			// Any earlier attempt that may have reached the provider is
			// looked for before every send, not only after a lost outcome:
			// a later attempt's not_sent answer proves only that its own
			// request did nothing, while a stale attempt's request (paused
			// past its lease, held at the provider) may have acted since
			// the last look-up.
			return Decision{Action: ActionLookup}
		case s.MaybeSent && s.Guarantee == effects.GuaranteeDeduplicated && s.PastWindow:
			return Decision{State: outbox.StateUnknown, Code: CodeDedupeWindowPassed, Outcome: "unknown", MaybeSent: true}
		}
		return Decision{Action: ActionSend}

	case StepLookedUp:
		switch {
		case s.LookupFailed:
			return Decision{State: outbox.StateRunning, Code: CodeLookupFailed, Outcome: "lookup_failed", MaybeSent: true, Retry: true}
		case s.Found:
			return Decision{State: outbox.StateSucceeded, Outcome: "reconciled"}
		case s.DeclarationChanged:
			return Decision{State: outbox.StateUnknown, Code: CodeDeclarationChanged, Outcome: "unknown", MaybeSent: true}
		}
		return Decision{Action: ActionSend}
	}

	switch s.Class {
	case "":
		return Decision{State: outbox.StateSucceeded, Outcome: "succeeded"}
	case effects.ClassPermanent:
		return Decision{State: outbox.StateFailed, Outcome: "failed"}
	case effects.ClassNotSent:
		if s.Last {
			return exhausted("not_sent")
		}
		return Decision{State: outbox.StatePending, Outcome: "not_sent", Retry: true}
	}
	// Ambiguous, or a class no effect should return: assume the worst.
	ambiguous := Decision{State: outbox.StateUnknown, Outcome: "ambiguous", MaybeSent: true}
	switch {
	case s.Last || s.Guarantee == effects.GuaranteeAtMostOnce:
		return ambiguous
	case s.Guarantee == effects.GuaranteeReconcilable:
		ambiguous.State, ambiguous.KeepLease, ambiguous.Retry = outbox.StateRunning, true, true
	default: // deduplicated: the same provider key makes a retry safe
		ambiguous.State, ambiguous.Retry = outbox.StatePending, true
	}
	return ambiguous
}

// Error codes the state machine records itself, on the intent
// (outbox.Intent.Error) and in Decision.Code.
const (
	// CodeAttemptsExhausted: the last attempt allowed ended without a
	// confirmation.
	CodeAttemptsExhausted = "attempts_exhausted"
	// CodeDeclarationChanged: an earlier attempt may have been sent under
	// another declaration of the effect than the one in force.
	CodeDeclarationChanged = "declaration_changed"
	// CodeDedupeWindowPassed: an earlier attempt may have acted, and the
	// intent is older than the provider's dedupe window.
	CodeDedupeWindowPassed = "dedupe_window_passed" //nolint:gosec // an error code: G101 reads "passed" as a password
	// CodeLookupFailed: a reconcilable effect's look-up failed.
	CodeLookupFailed = "lookup_failed"
	// CodeOutcomeLost: an attempt may have reached the provider and its
	// outcome was lost.
	CodeOutcomeLost = "outcome_lost"
)

package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/outbox-dev/outbox/effects"
)

// Error codes, as the HTTP API, MCP and the command line report them. The
// library's own errors carry the codes of what it refuses; CodeForbidden,
// CodeIdempotencyKeyMissing, CodeInternal, CodeRateLimited and
// CodeUnavailable are answered only by outboxd's surfaces, and are listed
// here so that one table names every code a caller of any of them can
// meet (docs/agents.md lists them with their HTTP statuses).
const (
	CodeApprovalMismatch      = "approval_mismatch"
	CodeForbidden             = "forbidden"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeIdempotencyKeyMissing = "idempotency_key_required"
	// CodeInternal is a failure of the server's, not the caller's.
	CodeInternal = "internal_error"
	// CodeInvalidArgs is arguments refused, by the enqueue or by the
	// effect when it runs (effects.CodeInvalidArgs, the same code).
	CodeInvalidArgs         = effects.CodeInvalidArgs
	CodeInvalidKey          = "invalid_key"
	CodeNotAwaitingApproval = "not_awaiting_approval"
	// CodeCancelRequested is a cancel's answer for an intent whose
	// provider holds the work as a task of its own (an MCP upstream's): the
	// intent could not be cancelled here, so the cancel was passed to the
	// provider, and the intent ends by what the provider reports
	// (cancelled if it stopped the work, its result if the work ended
	// first).
	CodeCancelRequested   = "cancel_requested"
	CodeNotCancellable    = "not_cancellable"
	CodeNotFound          = "not_found"
	CodeNotUnknown        = "not_unknown"
	CodePossibleDuplicate = "possible_duplicate"
	CodeRateLimited       = "rate_limited"
	// CodeUnavailable is a refusal of the server's while it cannot store
	// or read intents (the database is full, out of connections, locked,
	// or gone). The call was most likely not recorded (a commit whose
	// reply was lost may have been): send the same call with the same key
	// again after the answer's Retry-After, which is safe either way.
	CodeUnavailable   = "unavailable"
	CodeUnknownEffect = "unknown_effect"
)

// Error is an outbox error with a stable code and, for bad input, the field it
// concerns. Every sentinel below is an *Error, and errors.Is matches any
// *Error with the sentinel's code, so callers write
// errors.Is(err, outbox.ErrInvalidArgs) and errors.As(err, &outboxErr).
type Error struct {
	// Code is one of the Code constants.
	Code string
	// Field names the offending input ("key", "args.amount"), if any.
	Field string
	// Message explains the error.
	Message string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	if e.Message != "" {
		return e.Code + ": " + e.Message
	}
	return e.Code
}

// Is matches another *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

var (
	// ErrApprovalMismatch is an approval or denial that names arguments
	// (their args_sha256) other than the intent's.
	ErrApprovalMismatch = &Error{Code: CodeApprovalMismatch}
	// ErrKeyReused is a key already used for another action (other effect or
	// other args). Errors carrying it are *KeyReusedError.
	ErrKeyReused = &Error{Code: CodeIdempotencyKeyReused}
	// ErrInvalidArgs is arguments that fail the effect's validation.
	ErrInvalidArgs = &Error{Code: CodeInvalidArgs}
	// ErrInvalidKey is a key (or namespace) that is not 1 to 255 printable
	// ASCII characters.
	ErrInvalidKey = &Error{Code: CodeInvalidKey}
	// ErrNotCancellable is a cancel of an intent that is no longer pending, or
	// whose earlier attempt may have reached the provider.
	ErrNotCancellable = &Error{Code: CodeNotCancellable}
	// ErrCancelRequested matches a cancel passed to the provider that holds
	// the intent's work (CodeCancelRequested).
	ErrCancelRequested = &Error{Code: CodeCancelRequested}
	// ErrNotAwaitingApproval is an approval or denial of an intent that does
	// not await approval.
	ErrNotAwaitingApproval = &Error{Code: CodeNotAwaitingApproval}
	// ErrNotFound is a key with no intent in the namespace.
	ErrNotFound = &Error{Code: CodeNotFound}
	// ErrNotUnknown is a resolve of an intent that is not unknown.
	ErrNotUnknown = &Error{Code: CodeNotUnknown}
	// ErrPossibleDuplicate is a model's fresh key for an action recorded
	// moments before under another key. Errors carrying it are
	// *PossibleDuplicateError.
	ErrPossibleDuplicate = &Error{Code: CodePossibleDuplicate}
	// ErrUnknownEffect is an effect that is not enabled.
	ErrUnknownEffect = &Error{Code: CodeUnknownEffect}
)

// KeyReusedError is returned when a key was first used for another action. It
// carries the existing intent.
type KeyReusedError struct {
	// Existing is the intent first recorded under the key.
	Existing *Intent
}

func (e *KeyReusedError) Error() string {
	return fmt.Sprintf("%s: key %q was first used for another action (effect %s)",
		CodeIdempotencyKeyReused, e.Existing.Key, e.Existing.Effect)
}

// Is matches ErrKeyReused.
func (e *KeyReusedError) Is(target error) bool { return target == ErrKeyReused }

// PossibleDuplicateError is returned when a key supplied by a model is new,
// but the same action (effect and arguments equal as canonical JSON) was
// recorded moments before under another key: the model most likely
// re-emitted its call with a fresh key (docs/agents.md, "Keys").
type PossibleDuplicateError struct {
	// Earlier is the intent recorded under the earlier key.
	Earlier *Intent
	// Age is how long ago the earlier intent was recorded.
	Age time.Duration
}

func (e *PossibleDuplicateError) Error() string {
	return fmt.Sprintf("%s: the same action was recorded %s ago under key %q (state %s)",
		CodePossibleDuplicate, e.Age.Round(time.Second), e.Earlier.Key, e.Earlier.State)
}

// Is matches ErrPossibleDuplicate.
func (e *PossibleDuplicateError) Is(target error) bool { return target == ErrPossibleDuplicate }

// ErrorCode returns the outbox code of err ("" when err carries none).
func ErrorCode(err error) string {
	var ke *KeyReusedError
	if errors.As(err, &ke) {
		return CodeIdempotencyKeyReused
	}
	var pd *PossibleDuplicateError
	if errors.As(err, &pd) {
		return CodePossibleDuplicate
	}
	var oe *Error
	if errors.As(err, &oe) {
		return oe.Code
	}
	return ""
}

package effects

import (
	"errors"
	"fmt"
	"time"
)

// Class is what an effect's error says about the provider's side.
type Class string

const (
	// ClassNotSent means nothing reached the provider (connection refused, a
	// 429 or 503 the provider documents as not processed). The intent goes
	// back to pending and is retried with backoff.
	ClassNotSent Class = "not_sent"

	// ClassPermanent means the provider refused definitively (card declined,
	// invalid address). The intent fails and is never retried.
	ClassPermanent Class = "permanent"

	// ClassAmbiguous means the request may have been processed (timeout after
	// sending, connection reset, a 5xx). It is handled as a lost outcome, per
	// the effect's guarantee.
	ClassAmbiguous Class = "ambiguous"

	// ClassCancelled means the provider, asked to stop work it held as a
	// task of its own (Request.CancelRequestedFunc), reports that it
	// stopped before acting. The intent ends cancelled. The worker takes it
	// only from an attempt whose intent has a cancel request; otherwise it
	// counts as ambiguous.
	ClassCancelled Class = "cancelled"
)

// CodeInvalidArgs is the code of an error for arguments the effect refuses.
// It is outbox.CodeInvalidArgs, the code of an enqueue's refusal of them, so
// that a caller handles both alike; it is declared here so that an effect
// can use it without importing package outbox.
const CodeInvalidArgs = "invalid_args"

// Error is an effect error with its class and, for permanent errors, the code
// stored in the intent's error (for example "card_declined").
type Error struct {
	Class Class
	// Code is a stable snake_case code for the intent's error.
	Code string
	// Err is the underlying error; its message is stored in the intent, so it
	// must not contain secrets.
	Err error
	// RetryAfter, on a not-sent error, is how long the provider asked to be
	// left alone (its Retry-After): the worker then waits that long (capped)
	// without spending an attempt, instead of River's backoff. Zero means
	// the provider did not say.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Err == nil {
		return string(e.Class) + ": " + e.Code
	}
	return fmt.Sprintf("%s (%s): %v", e.Class, e.Code, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// NotSent classifies err as "nothing reached the provider".
func NotSent(code string, err error) error {
	return &Error{Class: ClassNotSent, Code: code, Err: err}
}

// NotSentRetryAfter classifies err as "nothing reached the provider", which
// asked to be called again after d (a 429 or 503 with Retry-After).
func NotSentRetryAfter(code string, err error, d time.Duration) error {
	return &Error{Class: ClassNotSent, Code: code, Err: err, RetryAfter: d}
}

// RetryAfterOf returns the wait a not-sent error asked for, or zero.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.Class == ClassNotSent && e.RetryAfter > 0 {
		return e.RetryAfter
	}
	return 0
}

// Permanent classifies err as a definitive refusal with code.
func Permanent(code string, err error) error {
	return &Error{Class: ClassPermanent, Code: code, Err: err}
}

// Ambiguous classifies err as "the request may have been processed".
func Ambiguous(code string, err error) error {
	return &Error{Class: ClassAmbiguous, Code: code, Err: err}
}

// Cancelled classifies err as "the provider stopped the work at the
// intent's cancel request, before acting".
func Cancelled(code string, err error) error {
	return &Error{Class: ClassCancelled, Code: code, Err: err}
}

// Classify returns err's class and code. An error that no effect classified is
// ambiguous: assuming "not sent" could send an effect twice.
func Classify(err error) (Class, string) {
	var e *Error
	if errors.As(err, &e) {
		code := e.Code
		if code == "" {
			code = string(e.Class)
		}
		return e.Class, code
	}
	return ClassAmbiguous, "ambiguous"
}

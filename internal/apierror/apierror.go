// Package apierror is the one table that maps the library's errors to what
// the HTTP API, the MCP server and the console answer: a code (outbox's
// Code constants, and the API's own CodeBodyTooLarge and CodeInvalidJSON),
// the field at fault, a message, and the HTTP status. A surface adds only
// its own spelling of the key's name (the Idempotency-Key header, the
// idempotency_key argument).
package apierror

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-dev/outbox/outbox"
)

// Codes of the HTTP API's own refusals, of a request the library never
// sees. They are answered as an *outbox.Error with the code, as the
// library's are.
const (
	// CodeBodyTooLarge is a request body over the API's limit.
	CodeBodyTooLarge = "body_too_large"
	// CodeInvalidJSON is a request body that is not valid JSON of the
	// expected shape.
	CodeInvalidJSON = "invalid_json"
	// CodeInvalidRequestState is an MCP call's requestState (an approval
	// answered from the host) that does not verify, has expired, was
	// issued to another caller or for other arguments, or was used
	// already (docs/agents.md, "Tasks and approvals in the host").
	CodeInvalidRequestState = "invalid_request_state"
)

// WaitMax is the longest wait for an intent's outcome that the HTTP API
// (?wait=) and MCP's get_intent (wait_seconds) accept: long polls beyond a
// minute are cut by proxies and clients alike.
const WaitMax = 60 * time.Second

// InternalMessage is what a caller reads of a server-side failure: the
// details are in the server's log, never in the answer.
const InternalMessage = "internal error; the server's log has the details"

// Problem is an error as a surface reports it.
type Problem struct {
	// Status is the HTTP status.
	Status int
	// Code is the error code (outbox.Code..., or this package's).
	Code string
	// Field names the input at fault, if any.
	Field string
	// Message says what is wrong and what to do.
	Message string
	// Internal is true for a failure of the server's, not the caller's:
	// answered 500 without details, and logged.
	Internal bool
	// PossibleDuplicate is the earlier action a possible_duplicate names.
	PossibleDuplicate *outbox.PossibleDuplicateError
	// RetryAfter is how long the caller should wait before sending the
	// call again (HTTP's Retry-After), 0 for no advice.
	RetryAfter time.Duration
	// Unavailable is why the database could not serve the call (one of
	// the Unavailable constants) for code unavailable, else "".
	Unavailable string
}

// Reasons the database could not serve a call, for an unavailable answer's
// message and outbox_database_unavailable_total{reason}.
const (
	// UnavailableConnections: no connection could be had
	// (max_connections, a pooler's limit).
	UnavailableConnections = "connections"
	// UnavailableDiskFull: the database could not write (disk full, out
	// of memory, or another of PostgreSQL's resource errors, class 53).
	UnavailableDiskFull = "disk_full"
	// UnavailableDown: the database went away or refused the connection
	// (restarting, shutting down, the network).
	UnavailableDown = "down"
	// UnavailableLockTimeout: a statement waited for a lock longer than
	// lock_timeout (OUTBOX_LOCK_TIMEOUT).
	UnavailableLockTimeout = "lock_timeout"
	// UnavailableStatementTimeout: a statement ran longer than
	// statement_timeout (OUTBOX_STATEMENT_TIMEOUT).
	UnavailableStatementTimeout = "statement_timeout"
)

// UnavailableReasons are every Unavailable constant, so that a metric can
// show each from the start.
var UnavailableReasons = []string{UnavailableConnections, UnavailableDiskFull, UnavailableDown, UnavailableLockTimeout, UnavailableStatementTimeout}

// RetryAfterUnavailable is the Retry-After of an unavailable answer: long
// enough that callers do not add to a database's trouble, short enough that
// they come back soon after it is over.
const RetryAfterUnavailable = 2 * time.Second

// unavailableMessages tell the caller what happened and what to do.
var unavailableMessages = map[string]string{
	UnavailableConnections:      "the database has no free connection",
	UnavailableDiskFull:         "the database cannot write (out of disk or memory)",
	UnavailableDown:             "the database cannot be reached",
	UnavailableLockTimeout:      "the database is locked (a migration or a long transaction)",
	UnavailableStatementTimeout: "the database is too slow to answer",
}

// UnavailableReason classifies err as the database's inability to serve a
// call, one of the Unavailable constants, or returns "" for any other
// error. Those are not the caller's mistakes nor outbox's bugs: the same
// call succeeds once the database recovers.
func UnavailableReason(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == pgerrcode.TooManyConnections || pgErr.Code == pgerrcode.ConfigurationLimitExceeded:
			return UnavailableConnections
		case pgerrcode.IsInsufficientResources(pgErr.Code):
			return UnavailableDiskFull
		case pgErr.Code == pgerrcode.LockNotAvailable:
			return UnavailableLockTimeout
		case pgErr.Code == pgerrcode.QueryCanceled:
			// statement_timeout; a cancel of the caller's own (its
			// request gone) is answered to nobody.
			return UnavailableStatementTimeout
		case pgErr.Code == pgerrcode.AdminShutdown || pgErr.Code == pgerrcode.CrashShutdown ||
			pgErr.Code == pgerrcode.CannotConnectNow || pgerrcode.IsConnectionException(pgErr.Code):
			return UnavailableDown
		}
		return ""
	}
	var (
		connectErr *pgconn.ConnectError
		netErr     net.Error
	)
	if errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err) {
		return UnavailableDown
	}
	return ""
}

// statusOf is each caller's error code's HTTP status.
var statusOf = map[string]int{
	outbox.CodeApprovalMismatch:      http.StatusConflict,
	outbox.CodeCancelRequested:       http.StatusConflict,
	CodeBodyTooLarge:                 http.StatusRequestEntityTooLarge,
	outbox.CodeForbidden:             http.StatusForbidden,
	outbox.CodeIdempotencyKeyMissing: http.StatusBadRequest,
	outbox.CodeIdempotencyKeyReused:  http.StatusUnprocessableEntity,
	outbox.CodeInvalidArgs:           http.StatusBadRequest,
	CodeInvalidJSON:                  http.StatusBadRequest,
	CodeInvalidRequestState:          http.StatusBadRequest,
	outbox.CodeInvalidKey:            http.StatusBadRequest,
	outbox.CodeNotAwaitingApproval:   http.StatusConflict,
	outbox.CodeNotCancellable:        http.StatusConflict,
	outbox.CodeNotFound:              http.StatusNotFound,
	outbox.CodeNotUnknown:            http.StatusConflict,
	outbox.CodePossibleDuplicate:     http.StatusConflict,
	outbox.CodeRateLimited:           http.StatusTooManyRequests,
	outbox.CodeUnknownEffect:         http.StatusBadRequest,
}

// Status returns a caller's error code's HTTP status; 400 for a code not in
// the table, which is a caller's mistake all the same.
func Status(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusBadRequest
}

// From maps err. keyName is how the surface spells the idempotency key
// ("Idempotency-Key", "idempotency_key"), named in the messages that tell
// the caller what to do with it.
func From(err error, keyName string) Problem {
	var (
		keyReused   *outbox.KeyReusedError
		possibleDup *outbox.PossibleDuplicateError
		outboxErr   *outbox.Error
		pgErr       *pgconn.PgError
	)
	switch {
	case errors.As(err, &possibleDup):
		return Problem{
			Status: http.StatusConflict, Code: outbox.CodePossibleDuplicate, Field: keyName, PossibleDuplicate: possibleDup,
			Message: fmt.Sprintf("the same action (effect %s, these arguments) was recorded %s ago under %s %q, and is %s: "+
				"if this is a retry of that action, send that key (or read that intent); "+
				"only to record a second, identical action, send new_action true",
				possibleDup.Earlier.Effect, possibleDup.Age.Round(time.Second), keyName, possibleDup.Earlier.Key, possibleDup.Earlier.State),
		}
	case errors.As(err, &keyReused):
		return Problem{
			Status: http.StatusUnprocessableEntity, Code: outbox.CodeIdempotencyKeyReused, Field: keyName,
			Message: fmt.Sprintf("this %s was first used for another action (effect %s, other arguments): "+
				"use a new key for a new action, or the first action's exact arguments to retry it", keyName, keyReused.Existing.Effect),
		}
	case errors.As(err, &outboxErr):
		return Problem{Status: Status(outboxErr.Code), Code: outboxErr.Code, Field: outboxErr.Field, Message: outboxErr.Message}
	case errors.As(err, &pgErr) && RefusedData(pgErr):
		return Problem{Status: http.StatusBadRequest, Code: outbox.CodeInvalidArgs, Field: "args",
			Message: "refused by the database: " + pgErr.Message}
	}
	if reason := UnavailableReason(err); reason != "" {
		// 503, never a 500 or a 201: the database could not store or read
		// the intent, and the same call with the same key is safe to send
		// again.
		return Problem{Status: http.StatusServiceUnavailable, Code: outbox.CodeUnavailable, RetryAfter: RetryAfterUnavailable, Unavailable: reason,
			Message: unavailableMessages[reason] + fmt.Sprintf("; send the same call, with the same %s, again in a few seconds", keyName)}
	}
	return Problem{Status: http.StatusInternalServerError, Code: outbox.CodeInternal, Message: InternalMessage, Internal: true}
}

// RefusedData reports whether the database refused a value the caller sent
// that the library's checks let through: a data exception (class 22, such
// as a number beyond jsonb's range, 1e1000000) or a value nested too deeply
// for the server (statement_too_complex). Those are the caller's mistakes,
// never a 5xx.
func RefusedData(pgErr *pgconn.PgError) bool {
	return pgerrcode.IsDataException(pgErr.Code) || pgErr.Code == pgerrcode.StatementTooComplex
}

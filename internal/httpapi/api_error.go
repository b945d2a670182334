package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-dev/outbox/outbox"
)

// apiError is an answer other than the intent: a status and the error body's
// code, field and message.
type apiError struct {
	code       string
	field      string
	message    string
	retryAfter int // seconds, sent as Retry-After when positive
	status     int
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

// errorBody is every error's JSON: {"error": {"code", "message"}}, with the
// offending input's "field" when there is one.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// statusOf is the HTTP status of each outbox error code (docs/agents.md, "Over HTTP").
var statusOf = map[string]int{
	outbox.CodeBodyTooLarge:          http.StatusRequestEntityTooLarge,
	outbox.CodeIdempotencyKeyMissing: http.StatusBadRequest,
	outbox.CodeIdempotencyKeyReused:  http.StatusUnprocessableEntity,
	outbox.CodeInvalidArgs:           http.StatusBadRequest,
	outbox.CodeInvalidJSON:           http.StatusBadRequest,
	outbox.CodeInvalidKey:            http.StatusBadRequest,
	outbox.CodeApprovalMismatch:      http.StatusConflict,
	outbox.CodeNotAwaitingApproval:   http.StatusConflict,
	outbox.CodeNotCancellable:        http.StatusConflict,
	outbox.CodeNotFound:              http.StatusNotFound,
	outbox.CodeNotUnknown:            http.StatusConflict,
	outbox.CodePossibleDuplicate:     http.StatusConflict,
	outbox.CodeUnknownEffect:         http.StatusBadRequest,
}

// toAPIError maps err to its answer. Outbox errors are the caller's (their
// code says what to fix); anything else is the server's, answered 500
// without details.
func toAPIError(err error) (*apiError, bool) {
	var (
		ae          *apiError
		keyReused   *outbox.KeyReusedError
		possibleDup *outbox.PossibleDuplicateError
		outboxErr   *outbox.Error
	)
	switch {
	case errors.As(err, &ae):
		return ae, true
	case errors.As(err, &possibleDup):
		return &apiError{
			status: http.StatusConflict,
			code:   outbox.CodePossibleDuplicate,
			field:  "Idempotency-Key",
			message: fmt.Sprintf("the same action (effect %s, these args) was recorded %s ago under Idempotency-Key %q, and is %s: "+
				"to retry it, send that key; to record a second, identical action, send \"new_action\": true",
				possibleDup.Earlier.Effect, possibleDup.Age.Round(time.Second), possibleDup.Earlier.Key, possibleDup.Earlier.State),
		}, true
	case errors.As(err, &keyReused):
		return &apiError{
			status: http.StatusUnprocessableEntity,
			code:   outbox.CodeIdempotencyKeyReused,
			message: fmt.Sprintf("this Idempotency-Key was first used for another action (effect %s, other arguments): "+
				"use a new key for a new action, or the first action's exact request to retry it", keyReused.Existing.Effect),
		}, true
	case errors.As(err, &outboxErr):
		status, ok := statusOf[outboxErr.Code]
		if !ok {
			status = http.StatusBadRequest
		}
		return &apiError{status: status, code: outboxErr.Code, field: outboxErr.Field, message: outboxErr.Message}, true
	case refusedData(err):
		var pgErr *pgconn.PgError
		errors.As(err, &pgErr)
		return &apiError{status: http.StatusBadRequest, code: outbox.CodeInvalidArgs, field: "args",
			message: "refused by the database: " + pgErr.Message}, true
	}
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error; the server's log has the details"}, false
}

// writeError answers err. A server-side error is logged, with the route's
// pattern rather than the path, which holds the key.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae, callers := toAPIError(err)
	if !callers {
		if r.Context().Err() != nil {
			// The client went away: nobody reads the answer, and it is not
			// the server's failure.
			return
		}
		h.logger.ErrorContext(r.Context(), "API request failed", "method", r.Method, "route", r.Pattern, "error", err)
	}
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="outbox"`)
	}
	if ae.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(ae.retryAfter))
	}
	if ae.message == "" {
		ae.message = ae.code
	}
	writeJSON(w, ae.status, errorBody{Error: errorDetail{Code: ae.code, Field: ae.field, Message: ae.message}})
}

// refusedData reports whether err is the database refusing a value the
// caller sent, which the library's checks let through: a data exception
// (class 22, such as a number beyond jsonb's numeric range, 1e1000000) or a
// value too deeply nested for the server (54001). Those are the caller's
// mistakes, never a 5xx.
func refusedData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || pgErr.Code == "54001")
}

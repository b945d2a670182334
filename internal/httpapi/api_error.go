package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/outbox-dev/outbox/internal/apierror"
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

// toAPIError maps err to its answer (internal/apierror's table). Outbox
// errors are the caller's (their code says what to fix); anything else is
// the server's, answered 500 without details.
func toAPIError(err error) (*apiError, bool) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae, true
	}
	p := apierror.From(err, "Idempotency-Key")
	return &apiError{status: p.Status, code: p.Code, field: p.Field, message: p.Message}, !p.Internal
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

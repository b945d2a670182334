package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

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
	// unavailable is why the database could not serve the request, for
	// code unavailable.
	unavailable string
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
	return &apiError{status: p.Status, code: p.Code, field: p.Field, message: p.Message,
		retryAfter: int((p.RetryAfter + time.Second - 1) / time.Second), unavailable: p.Unavailable}, !p.Internal
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
	if ae.unavailable != "" {
		if h.unavailableFunc != nil {
			h.unavailableFunc(ae.unavailable)
		}
		// Once a second at most: during an outage every request fails
		// alike, and the metric counts them all.
		now := time.Now().UnixNano()
		if last := h.unavailableLogged.Load(); now-last >= int64(time.Second) && h.unavailableLogged.CompareAndSwap(last, now) {
			h.logger.WarnContext(r.Context(), "API request refused: the database cannot serve it", "route", r.Pattern, "reason", ae.unavailable, "error", err)
		}
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

package apierror_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/outbox"
)

func TestFrom(t *testing.T) {
	t.Parallel()

	earlier := &outbox.Intent{Key: "order-1", Effect: "charge", State: outbox.StatePending}
	tests := []struct {
		name     string
		err      error
		status   int
		code     string
		field    string
		internal bool
		contains string
	}{
		{"NotFound", fmt.Errorf("wrapped: %w", outbox.ErrNotFound), http.StatusNotFound, outbox.CodeNotFound, "", false, ""},
		{"InvalidArgs", &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "args.amount", Message: "must be positive"}, http.StatusBadRequest, outbox.CodeInvalidArgs, "args.amount", false, "must be positive"},
		{"Forbidden", &outbox.Error{Code: outbox.CodeForbidden}, http.StatusForbidden, outbox.CodeForbidden, "", false, ""},
		{"RateLimited", &outbox.Error{Code: outbox.CodeRateLimited}, http.StatusTooManyRequests, outbox.CodeRateLimited, "", false, ""},
		{"UnknownCodeIsTheCallers", &outbox.Error{Code: "something_new"}, http.StatusBadRequest, "something_new", "", false, ""},
		{"KeyReused", &outbox.KeyReusedError{Existing: earlier}, http.StatusUnprocessableEntity, outbox.CodeIdempotencyKeyReused, "Idempotency-Key", false, "first used for another action (effect charge"},
		{"PossibleDuplicate", &outbox.PossibleDuplicateError{Earlier: earlier, Age: 90 * time.Second}, http.StatusConflict, outbox.CodePossibleDuplicate, "Idempotency-Key", false, `under Idempotency-Key "order-1"`},
		{"DataException", &pgconn.PgError{Code: "22003", Message: "value overflows numeric format"}, http.StatusBadRequest, outbox.CodeInvalidArgs, "args", false, "refused by the database"},
		{"TooDeep", &pgconn.PgError{Code: "54001", Message: "stack depth limit exceeded"}, http.StatusBadRequest, outbox.CodeInvalidArgs, "args", false, ""},
		{"ServerSide", errors.New("connection refused"), http.StatusInternalServerError, outbox.CodeInternal, "", true, "server's log"},
		{"OtherDatabaseError", &pgconn.PgError{Code: "42P01", Message: "relation does not exist"}, http.StatusInternalServerError, outbox.CodeInternal, "", true, ""},
		{"TooManyConnections", &pgconn.PgError{Code: "53300", Message: "too many connections"}, http.StatusServiceUnavailable, outbox.CodeUnavailable, "", false, "no free connection"},
		{"DiskFull", fmt.Errorf("error inserting intent: %w", &pgconn.PgError{Code: "53100", Message: "could not extend file"}), http.StatusServiceUnavailable, outbox.CodeUnavailable, "", false, "cannot write"},
		{"LockTimeout", &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}, http.StatusServiceUnavailable, outbox.CodeUnavailable, "", false, "same Idempotency-Key"},
		{"StatementTimeout", &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}, http.StatusServiceUnavailable, outbox.CodeUnavailable, "", false, "too slow"},
		{"ShuttingDown", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, http.StatusServiceUnavailable, outbox.CodeUnavailable, "", false, "cannot be reached"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := apierror.From(tt.err, "Idempotency-Key")
			require.Equal(t, tt.status, p.Status)
			require.Equal(t, tt.code, p.Code)
			require.Equal(t, tt.field, p.Field)
			require.Equal(t, tt.internal, p.Internal)
			require.Contains(t, p.Message, tt.contains)
			require.NotContains(t, p.Message, "connection refused", "a server-side cause never reaches the caller")
			if tt.code == outbox.CodeUnavailable {
				require.Equal(t, apierror.RetryAfterUnavailable, p.RetryAfter)
				require.NotEmpty(t, p.Unavailable)
			} else {
				require.Zero(t, p.RetryAfter)
				require.Empty(t, p.Unavailable)
			}
		})
	}
}

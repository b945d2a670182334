package daemon

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/migrations"
)

// TestReadyz checks /readyz's answers, each against the API's document
// (its Readiness schema), and that probes need no credentials.
func TestReadyz(t *testing.T) {
	t.Parallel()

	doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPIJSON)
	require.NoError(t, err)
	readiness := doc.Components.Schemas["Readiness"].Value
	require.NotNil(t, readiness)

	serve := func(t *testing.T, pool *pgxpool.Pool, schema string, held ...string) *httptest.ResponseRecorder {
		t.Helper()
		var heldFunc func() map[string]string
		if len(held) > 0 {
			heldFunc = func() map[string]string { return map[string]string{held[0]: held[1]} }
		}
		migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
		require.NoError(t, err)
		// Behind the API's: a request with no credentials is served.
		handler := newHTTPHandler(&httpHandlerConfig{
			API: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusUnauthorized)
			}),
			Ready: newReadyz(migrator, heldFunc, slog.New(slog.DiscardHandler)),
		}, partsAll)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
		var v any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), "%s", rec.Body)
		require.NoError(t, readiness.VisitJSON(v, openapi3.EnableJSONSchema2020()))
		return rec
	}

	t.Run("Ready", func(t *testing.T) {
		t.Parallel()
		pool, schema := testdb.MigratedSchema(t)
		rec := serve(t, pool, schema)
		require.Equal(t, http.StatusOK, rec.Code)
		require.JSONEq(t, `{"status": "ready"}`, rec.Body.String())
	})

	// A replica whose lock of an MCP upstream differs from the recorded
	// one says so, and stays ready for the rest.
	t.Run("HeldUpstream", func(t *testing.T) {
		t.Parallel()
		pool, schema := testdb.MigratedSchema(t)
		rec := serve(t, pool, schema, "notes", "this replica's lock differs")
		require.Equal(t, http.StatusOK, rec.Code)
		require.JSONEq(t, `{"status": "ready", "held_upstreams": {"notes": "this replica's lock differs"}}`, rec.Body.String())
	})

	t.Run("PendingMigrations", func(t *testing.T) {
		t.Parallel()
		rec := serve(t, testdb.Pool(t), testdb.Schema(t))
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.JSONEq(t, `{"status": "unavailable", "reason": "pending migrations"}`, rec.Body.String())
	})

	t.Run("DatabaseUnreachable", func(t *testing.T) {
		t.Parallel()
		pool, err := pgxpool.New(t.Context(), "postgres://nobody:secret-pw@127.0.0.1:1/none?connect_timeout=2")
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		rec := serve(t, pool, "outbox")
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.JSONEq(t, `{"status": "unavailable", "reason": "database unreachable"}`, rec.Body.String())
		require.NotContains(t, rec.Body.String(), "secret-pw")
	})
}

package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/outbox-dev/outbox/migrations"
)

// readyTimeout bounds /readyz's look at the database.
const readyTimeout = 5 * time.Second

// newReadyz returns /readyz: 200 when the database is reachable and
// migrator's migrations are current, else 503 with the reason. Probes call
// it without credentials. Its answers are those of the API's document
// (httpapi's openapi.yaml, Readiness).
//
// held, when set, names the MCP upstreams whose queue this replica holds:
// listed as held_upstreams, the replica still ready for the rest.
func newReadyz(migrator *migrations.Migrator, held func() map[string]string, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		st, err := migrator.Status(ctx)
		switch {
		case err != nil:
			logger.WarnContext(ctx, "not ready: database unreachable", "error", err)
			writeReadiness(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "database unreachable"})
		case !st.UpToDate():
			writeReadiness(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "pending migrations"})
		default:
			ready := map[string]any{"status": "ready"}
			if held != nil {
				if h := held(); len(h) > 0 {
					ready["held_upstreams"] = h
				}
			}
			writeReadiness(w, http.StatusOK, ready)
		}
	})
}

// writeReadiness writes v as /readyz's answer, with the headers of the
// API's answers.
func writeReadiness[V any](w http.ResponseWriter, status int, v map[string]V) {
	// JSON, never sniffed into HTML.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client's connection is its own problem
}

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/console"
)

// riverUIPrefix is where serve mounts River UI.
const riverUIPrefix = "/riverui"

// httpHandlerConfig is what newHTTPHandler serves.
type httpHandlerConfig struct {
	// API serves /v1/ and /mcp (package httpapi). Nil serves neither.
	API http.Handler

	// AuthFailureFunc, when set, counts each River UI request refused for
	// its credentials, as the API's.
	AuthFailureFunc func()

	// Console serves /console/, the operator console (package console),
	// where River UI is served. Nil serves none.
	Console http.Handler

	// FailureLimiter slows each address that presents wrong credentials
	// (a 401 to a request that carried any): beyond its budget, 429 with
	// Retry-After, credentials unchecked. Nil slows nothing.
	FailureLimiter *access.FailureLimiter

	// Logger records River UI's changes (cancel, delete, retry, pause) with
	// the user who made them. Defaults to a logger that discards.
	Logger *slog.Logger

	// Metrics is what /metrics exposes.
	Metrics prometheus.Gatherer

	// Ready serves /readyz (newReadyz). Nil serves none.
	Ready http.Handler

	// RiverUI serves /riverui/, behind basic auth (UIUser, UIPassword) or,
	// without credentials, to loopback requests only. Nil serves no UI.
	RiverUI http.Handler

	// UIPassword and UIUser are River UI's basic auth credentials
	// (OUTBOX_UI_PASSWORD, OUTBOX_UI_USER); both empty means no
	// credentials.
	UIPassword, UIUser string
}

// httpParts says which paths a listener serves.
type httpParts int

const (
	// partsAll is everything on one listener.
	partsAll httpParts = iota
	// partsPublic is the agents' paths only: /v1/ and /mcp.
	partsPublic
	// partsAdmin is the operators' paths: /healthz, /readyz, /metrics,
	// River UI and the console.
	partsAdmin
)

// newHTTPHandler returns serve's HTTP handler for parts: /healthz,
// /metrics, River UI and the API's paths, or the public or admin share of
// them when OUTBOX_ADMIN_ADDR splits them over two listeners.
func newHTTPHandler(config *httpHandlerConfig, parts httpParts) http.Handler {
	return slowFailures(newHTTPMux(config, parts), config.FailureLimiter)
}

// newHTTPMux is newHTTPHandler's routes.
func newHTTPMux(config *httpHandlerConfig, parts httpParts) http.Handler {
	mux := http.NewServeMux()
	public, admin := parts != partsAdmin, parts != partsPublic
	if admin {
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			// Alive is all this says; the database is not asked (/readyz
			// does).
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
		})
		mux.Handle("GET /metrics", promhttp.HandlerFor(config.Metrics, promhttp.HandlerOpts{}))
	}
	if config.API != nil && public {
		mux.Handle("/v1/", config.API)
		mux.Handle("/mcp", config.API)
	}
	if config.Ready != nil && admin {
		// Beside the API's handler, not in it: /readyz is not traced, as
		// probes every few seconds would bury the agents' requests.
		mux.Handle("GET /readyz", config.Ready)
	}
	if config.RiverUI != nil && admin {
		// The mux redirects /riverui to /riverui/; River UI strips the
		// prefix itself.
		logger := config.Logger
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		failed := config.AuthFailureFunc
		if failed == nil {
			failed = func() {}
		}
		mux.Handle(riverUIPrefix+"/", protectRiverUI(config.RiverUI, config.UIUser, config.UIPassword, logger, failed))
	}
	if config.Console != nil && admin {
		// The console signs its users in itself (operator and reader
		// tokens, or River UI's user) and guards its own POSTs.
		mux.Handle(console.Prefix+"/", config.Console)
	}
	return mux
}

// newRiverUI returns River UI for client, under riverUIPrefix. It serves once
// started (Handler.Start), and stops when Start's context ends. River's jobs
// carry only their intent's id, so the UI shows no agent's arguments.
func newRiverUI(client *river.Client[pgx.Tx], logger *slog.Logger) (*riverui.Handler, error) {
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger.With(slog.String("component", "riverui")),
		Prefix:    riverUIPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating River UI: %w", err)
	}
	return ui, nil
}

// startRiverUI starts ui's background services until the returned stop is
// called.
func startRiverUI(ctx context.Context, ui *riverui.Handler) (stop func(), err error) {
	// River UI stops when Start's context ends; serve stops it itself, after
	// the HTTP server, so it gets a context that only stop cancels.
	uiCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := ui.Start(uiCtx); err != nil {
		cancel()
		return nil, fmt.Errorf("error starting River UI: %w", err)
	}
	return cancel, nil
}

// protectRiverUI puts River UI behind HTTP basic auth, or, with no
// credentials configured, lets through only requests that came through a
// loopback address with a loopback Host (the API's rule: serve refuses to
// listen elsewhere without credentials, and the Host check stops a page that
// rebinds its DNS name to 127.0.0.1). Cross-origin requests from browsers
// are refused first: a browser sends cached basic credentials to any page
// that asks, and River UI's API can cancel, retry and delete jobs.
//
// Each request that may change something (any method but GET, HEAD and
// OPTIONS: River UI's cancel, delete, retry, pause and resume) is logged at
// info with the user who sent it, for the audit trail.
func protectRiverUI(ui http.Handler, user, password string, logger *slog.Logger, authFailed func()) http.Handler {
	protect := http.NewCrossOriginProtection()
	return protect.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case user == "":
			if !access.FromLoopback(r) {
				http.Error(w, "River UI: without OUTBOX_UI_USER and OUTBOX_UI_PASSWORD it answers only on a loopback address", http.StatusForbidden)
				return
			}
		case !access.BasicAuthMatches(r, user, password):
			authFailed()
			w.Header().Set("WWW-Authenticate", `Basic realm="outbox River UI", charset="UTF-8"`)
			http.Error(w, "River UI: the user and password of OUTBOX_UI_USER and OUTBOX_UI_PASSWORD are required", http.StatusUnauthorized)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			who := user
			if who == "" {
				who = "local" // loopback without credentials
			}
			logger.InfoContext(r.Context(), "River UI change", "method", r.Method, "path", r.URL.Path, "user", who)
		}
		ui.ServeHTTP(w, r)
	}))
}

// slowFailures answers 429 rate_limited with Retry-After, without looking at
// its credentials, to a request that presents credentials from an address
// that spent its budget of wrong credentials, and spends one for every 401 answered to a request
// that presented credentials (a bearer token, basic auth, the console's
// sign-in form). The API, the console and River UI share the budget.
func slowFailures(next http.Handler, limiter *access.FailureLimiter) http.Handler {
	if limiter == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := access.RemoteHost(r)
		presented := r.Header.Get("Authorization") != "" || r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, console.Prefix+"/login")
		// A request without credentials (a probe, /metrics, a browser's
		// first request before its password prompt) is never slowed.
		if wait := limiter.Wait(host); presented && wait > 0 {
			secs := max(1, int(math.Ceil(wait.Seconds())))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"code":"rate_limited","message":"too many wrong credentials from this address; retry after ` + strconv.Itoa(secs) + ` s"}}` + "\n"))
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if presented && sw.status == http.StatusUnauthorized {
			limiter.Failed(host)
		}
	})
}

// statusWriter records the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes flushes on: /mcp and long polls stream.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

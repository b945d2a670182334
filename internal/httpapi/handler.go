package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

const (
	// MaxWaitsDefault is Config.MaxWaits's default: OUTBOX_MAX_WAITS's.
	// Waits share one LISTEN connection (outbox.Client.Wait), so a wait
	// costs a goroutine, not a database connection.
	MaxWaitsDefault = 1000

	// readyTimeout bounds /readyz's look at the database.
	readyTimeout = 5 * time.Second
)

// Config configures the API handler.
type Config struct {
	// AuthFailureFunc, when set, is called once for each request refused
	// for its token (401), for outbox_http_auth_failures_total. Defaults
	// to nil.
	AuthFailureFunc func()

	// AutoKeyWindow is the window of /mcp's automatic key (see
	// mcpserver.Config). Defaults to keyguard.WindowDefault.
	AutoKeyWindow time.Duration

	// DatabaseUnavailableFunc, when set, is called with the reason
	// (apierror's Unavailable constants) of each request answered 503
	// unavailable because the database could not serve it, for
	// outbox_database_unavailable_total. Defaults to nil.
	DatabaseUnavailableFunc func(reason string)

	// Logger receives the handler's diagnostics: server-side failures, never
	// tokens, keys, arguments or bodies. Defaults to a logger that discards.
	Logger *slog.Logger

	// MCPPassthrough are MCP upstream tools /mcp forwards live. Defaults
	// to none.
	MCPPassthrough []mcpserver.PassthroughTool

	// MCPTools are /mcp's mutating tools. Defaults to
	// mcpserver.ToolsFor(the client's effects).
	MCPTools []*mcpserver.EffectTool

	// ModelKeyGuard is what /mcp's tools, and enqueues sent with
	// Idempotency-Key-Source: model, do with a model's fresh key for an
	// action recorded within AutoKeyWindow under another key (package
	// keyguard). Defaults to keyguard.ModeDefault.
	ModelKeyGuard keyguard.Mode

	// PossibleDuplicateFunc, when set, is called with the tool (the effect
	// over HTTP) and the outcome of each possible duplicate the guard met.
	// Defaults to nil.
	PossibleDuplicateFunc func(tool, outcome string)

	// RateLimit bounds each token's enqueues, over HTTP and /mcp; a request
	// beyond it is 429 rate_limited with Retry-After. Defaults to no limit.
	RateLimit RateLimit

	// Tokens are the bearer tokens: each acts for its namespace, with its
	// role (access.ParseTokens, access.ParseTokenFile). When empty, requests need no token
	// and act for outbox.NamespaceDefault as operator, and the handler
	// answers only requests that came through a loopback address (serve
	// refuses to run so unless told to). Defaults to none.
	Tokens []access.Token

	// TracerProvider makes each request a span, and each /mcp tool call
	// (mcpserver.Config). Defaults to the global provider, a no-op unless
	// traces were configured (package telemetry).
	TracerProvider trace.TracerProvider

	// Version is the server version /mcp reports. Defaults to
	// mcpserver.VersionDefault.
	Version string

	// MaxWaits bounds the waits (?wait= and get_intent's wait_seconds) in
	// progress at once, shared fairly by namespace: each namespace a token
	// names gets an equal share, so one tenant's waits never delay
	// another's. A wait first reads the intent, and takes a share only if
	// the intent is not final; a wait beyond its namespace's share queues
	// until one frees or its time is up, and then answers the intent as it
	// stands. Defaults to MaxWaitsDefault.
	MaxWaits int
}

// Handler serves the HTTP API of docs/agents.md: /v1/intents, /v1/effects,
// /v1/openapi.json, /readyz and /mcp. It is safe for concurrent use.
type Handler struct {
	client           *outbox.Client
	effects          *effectsAnswer
	defaultNamespace string
	handler          http.Handler
	limits           *limiters
	// authFailureFunc, authLogMu and authLogged count and log refused
	// requests (authFailed).
	authFailureFunc func()
	authLogMu       sync.Mutex
	authLogged      map[string]time.Time
	// unavailableFunc and unavailableLogged count and log the requests
	// the database could not serve (writeError).
	unavailableFunc   func(reason string)
	unavailableLogged atomic.Int64
	logger            *slog.Logger
	mcpServers        map[string]*mcp.Server
	migrator          *migrations.Migrator
	pool              *pgxpool.Pool
	tokens            []access.Token
	// waits are the namespaces' shares of MaxWaits.
	waits    map[string]chan struct{}
	guard    *keyguard.Guard
	maxWaits int
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.AutoKeyWindow == 0 {
		out.AutoKeyWindow = keyguard.WindowDefault
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.MaxWaits == 0 {
		out.MaxWaits = MaxWaitsDefault
	}
	if out.ModelKeyGuard == "" {
		out.ModelKeyGuard = keyguard.ModeDefault
	}
	return &out
}

// validate checks a config with its defaults.
func (c *Config) validate() error {
	if c.AutoKeyWindow < 0 {
		return fmt.Errorf("httpapi: AutoKeyWindow must be positive, not %s", c.AutoKeyWindow)
	}
	if c.MaxWaits < 0 {
		return fmt.Errorf("httpapi: MaxWaits must be positive, not %d", c.MaxWaits)
	}
	if err := access.CheckDuplicates(c.Tokens); err != nil {
		return fmt.Errorf("httpapi: tokens: %w", err)
	}
	for _, t := range c.Tokens {
		if err := outbox.ValidateNamespace(t.Namespace); err != nil {
			return fmt.Errorf("httpapi: token for an invalid namespace: %w", err)
		}
		if !t.Role.Valid() {
			return fmt.Errorf("httpapi: token %s has no valid role (%s)", t.Fingerprint(), t.Role)
		}
	}
	return nil
}

// New returns the API handler. client carries out the operations; pool runs
// the enqueues and the readiness check.
func New(pool *pgxpool.Pool, client *outbox.Client, config *Config) (*Handler, error) {
	if pool == nil || client == nil {
		return nil, errors.New("httpapi: pool and client must not be nil")
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	h := &Handler{
		client:           client,
		defaultNamespace: outbox.NamespaceDefault,
		authFailureFunc:  config.AuthFailureFunc,
		unavailableFunc:  config.DatabaseUnavailableFunc,
		authLogged:       map[string]time.Time{},
		limits:           &limiters{limit: config.RateLimit, byKey: map[string]*rate.Limiter{}},
		logger:           config.Logger,
		mcpServers:       map[string]*mcp.Server{},
		pool:             pool,
	}
	maxWaits := config.MaxWaits
	h.maxWaits = maxWaits

	namespaces := []string{h.defaultNamespace}
	if len(config.Tokens) > 0 {
		namespaces = nil
		for _, t := range config.Tokens {
			h.tokens = append(h.tokens, t)
			if !slices.Contains(namespaces, t.Namespace) {
				namespaces = append(namespaces, t.Namespace)
			}
		}
	}
	h.waits = make(map[string]chan struct{}, len(namespaces))
	for _, namespace := range namespaces {
		h.waits[namespace] = make(chan struct{}, max(1, maxWaits/len(namespaces)))
	}
	var err error
	if h.migrator, err = migrations.New(pool, client.Schema()); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	if h.guard, err = keyguard.New(pool, client, &keyguard.Config{
		Mode: config.ModelKeyGuard, ObserverFunc: config.PossibleDuplicateFunc, Window: config.AutoKeyWindow,
	}); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}

	tools := config.MCPTools
	if tools == nil {
		if tools, err = mcpserver.ToolsFor(client.Effects()); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
	}
	if h.effects, err = newEffectsAnswer(client.Effects(), tools); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}

	// One MCP server per namespace, each acting only in its own: the
	// request's token picks it.
	for _, namespace := range namespaces {
		srv, err := mcpserver.New(pool, client, &mcpserver.Config{
			// Without tokens /mcp answers loopback alone, as the API does,
			// and acts as the API's local principal.
			Actor:                 access.APIActor(access.ActorLocal),
			AutoKeyWindow:         config.AutoKeyWindow,
			Logger:                h.logger,
			ModelKeyGuard:         config.ModelKeyGuard,
			Namespace:             namespace,
			Passthrough:           config.MCPPassthrough,
			PossibleDuplicateFunc: config.PossibleDuplicateFunc,
			RateLimitFunc:         h.limits.take,
			Tools:                 config.MCPTools,
			TracerProvider:        config.TracerProvider,
			Version:               config.Version,
			WaitFunc:              h.wait,
		})
		if err != nil {
			return nil, err
		}
		h.mcpServers[namespace] = srv
	}
	// Stateless: every request stands alone, so any replica of serve can
	// answer any request, and there is no session for another namespace's
	// token to take over.
	mcpHandler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		namespace, _ := namespaceFrom(r.Context())
		return h.mcpServers[namespace]
	}, &mcp.StreamableHTTPOptions{
		Logger:              mcpserver.SDKLogger(h.logger),
		MaxRequestBodyBytes: BodyMax,
		Stateless:           true,
	})

	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", h.readyz)
	mcpRoute := http.Handler(mcpHandler)
	if len(h.tokens) > 0 {
		// The SDK hands TokenInfo to every tool call (req.Extra), which is
		// how the tools learn the token's role. withAuth has checked the
		// token already; this only passes its principal on.
		mcpRoute = auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
			p, ok := principalFrom(r.Context())
			if !ok {
				return nil, auth.ErrInvalidToken
			}
			return &auth.TokenInfo{Scopes: []string{p.role.String()}, UserID: p.name, Expiration: time.Now().Add(time.Hour)}, nil
		}, nil)(mcpHandler)
	}
	mux.Handle("/mcp", h.withAuth(mcpRoute))
	mux.Handle("GET /v1/effects", h.api(access.RoleReader, h.listEffects))
	mux.HandleFunc("GET /v1/openapi.json", h.openAPI)
	mux.Handle("POST /v1/intents", h.api(access.RoleAgent, h.limited(h.enqueue)))
	mux.Handle("GET /v1/intents", h.api(access.RoleReader, h.list))
	mux.Handle("GET /v1/intents/{key}", h.api(access.RoleReader, h.get))
	mux.Handle("POST /v1/intents/{key}/cancel", h.api(access.RoleAgent, h.cancel))
	mux.Handle("POST /v1/intents/{key}/resolve", h.api(access.RoleOperator, h.resolve))
	mux.Handle("POST /v1/intents/{key}/approve", h.api(access.RoleOperator, h.approve))
	mux.Handle("POST /v1/intents/{key}/deny", h.api(access.RoleOperator, h.deny))
	// The same paths with any other method, and any other path under /v1/,
	// answer in JSON too, after authentication: a caller without a token
	// learns nothing of which paths exist.
	mux.Handle("/v1/effects", h.api(access.RoleReader, methodNotAllowed("GET")))
	mux.Handle("/v1/intents", h.api(access.RoleReader, methodNotAllowed("GET, POST")))
	mux.Handle("/v1/intents/{key}", h.api(access.RoleReader, methodNotAllowed("GET, HEAD")))
	mux.Handle("/v1/intents/{key}/cancel", h.api(access.RoleReader, methodNotAllowed("POST")))
	mux.Handle("/v1/intents/{key}/resolve", h.api(access.RoleReader, methodNotAllowed("POST")))
	mux.Handle("/v1/intents/{key}/approve", h.api(access.RoleReader, methodNotAllowed("POST")))
	mux.Handle("/v1/intents/{key}/deny", h.api(access.RoleReader, methodNotAllowed("POST")))
	mux.Handle("/v1/", h.api(access.RoleReader, func(http.ResponseWriter, *http.Request, string) error {
		return &apiError{status: http.StatusNotFound, code: outbox.CodeNotFound, message: "no such endpoint"}
	}))

	// A browser page of another origin must not act with the browser's
	// access to the API (without tokens, anything on the machine has it).
	// Requests that are not from a browser carry no Sec-Fetch-Site or Origin
	// and pass.
	crossOrigin := http.NewCrossOriginProtection()
	crossOrigin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, &apiError{status: http.StatusForbidden, code: outbox.CodeForbidden, message: "cross-origin requests are refused"})
	}))
	h.handler = traced(crossOrigin.Handler(mux), config.TracerProvider)
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every answer is JSON: a browser must never sniff one into HTML.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.handler.ServeHTTP(w, r)
}

// apiFunc is an API endpoint: it acts for namespace, writes its answer, and
// returns the error to answer instead.
type apiFunc func(w http.ResponseWriter, r *http.Request, namespace string) error

// api authenticates a request, checks that its token's role is at least
// need, and runs fn for its namespace.
func (h *Handler) api(need access.Role, fn apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := h.authenticate(r)
		if err == nil && !p.role.Allows(need) {
			err = forbiddenRole(need, p.role)
		}
		if err == nil {
			err = fn(w, r.WithContext(withPrincipal(r.Context(), p)), p.namespace)
		}
		if err != nil {
			h.writeError(w, r, err)
		}
	})
}

// withAuth authenticates a request and passes it on with its namespace.
func (h *Handler) withAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := h.authenticate(r)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
	})
}

func methodNotAllowed(allow string) apiFunc {
	return func(w http.ResponseWriter, r *http.Request, _ string) error {
		w.Header().Set("Allow", allow)
		return &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
			message: fmt.Sprintf("method %s is not allowed here; allowed: %s", r.Method, allow)}
	}
}

// readyz answers 200 when the database is reachable and its migrations are
// current, else 503. Probes call it without a token.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	st, err := h.migrator.Status(ctx)
	switch {
	case err != nil:
		h.logger.WarnContext(ctx, "not ready: database unreachable", "error", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "database unreachable"})
	case !st.UpToDate():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "pending migrations"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

// writeJSON writes v as the answer, with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client's connection is its own problem
}

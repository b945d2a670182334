package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/outbox"
)

// Config configures the API handler. What the handler shares with /mcp
// and with the rest of the process (the key guard, the MCP servers, the
// waits and the rate limiter) it takes ready-made: package daemon builds
// them, so that one place composes the process.
type Config struct {
	// AuthFailureFunc, when set, is called once for each request refused
	// for its token (401), for outbox_http_auth_failures_total. Defaults
	// to nil.
	AuthFailureFunc func()

	// DatabaseUnavailableFunc, when set, is called with the reason
	// (apierror's Unavailable constants) of each request answered 503
	// unavailable because the database could not serve it, for
	// outbox_database_unavailable_total. Defaults to nil.
	DatabaseUnavailableFunc func(reason string)

	// Guard guards the enqueues sent with Idempotency-Key-Source: model
	// as /mcp's tools are guarded (package keyguard). Required.
	Guard *keyguard.Guard

	// Logger receives the handler's diagnostics: server-side failures, never
	// tokens, keys, arguments or bodies. Defaults to a logger that discards.
	Logger *slog.Logger

	// MCPServers serve /mcp, one for each namespace of Namespaces(Tokens),
	// each acting only in its own: the request's token picks it. Their
	// RateLimitFunc and WaitFunc should be RateLimiter's and Waits', so
	// that the limits hold across HTTP and /mcp. Required.
	MCPServers map[string]*mcp.Server

	// MCPTools are /mcp's mutating tools, whose arguments' schemas
	// GET /v1/effects lists. Defaults to mcpserver.ToolsFor(the client's
	// effects).
	MCPTools []*mcpserver.EffectTool

	// RateLimiter bounds each token's enqueues, over HTTP and /mcp; a
	// request beyond it is 429 rate_limited with Retry-After. Defaults to
	// nil: no limit.
	RateLimiter *RateLimiter

	// Tokens are the bearer tokens: each acts for its namespace, with its
	// role (access.ParseTokens, access.ParseTokenFile). When empty,
	// requests need no token and act for outbox.NamespaceDefault as
	// operator, and the handler answers only requests that came through a
	// loopback address (serve refuses to run so unless told to). Defaults
	// to none.
	Tokens []access.Token

	// TracerProvider makes each request a span. Defaults to the global
	// provider, a no-op unless traces were configured (package telemetry).
	TracerProvider trace.TracerProvider

	// Waits bound the waits (?wait= and get_intent's wait_seconds) in
	// progress at once, shared fairly by namespace. Required.
	Waits *Waits
}

// Handler serves the HTTP API of docs/agents.md: /v1/intents, /v1/effects,
// /v1/openapi.json and /mcp. It is safe for concurrent use.
type Handler struct {
	client           *outbox.Client
	effects          *effectsAnswer
	defaultNamespace string
	handler          http.Handler
	limiter          *RateLimiter
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
	tokens            []access.Token
	waits             *Waits
	guard             *keyguard.Guard
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return &out
}

// validate checks a config with its defaults.
func (c *Config) validate() error {
	if c.Guard == nil || c.Waits == nil {
		return errors.New("httpapi: Guard and Waits must be set")
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
	for _, namespace := range Namespaces(c.Tokens) {
		if c.MCPServers[namespace] == nil {
			return fmt.Errorf("httpapi: no MCP server for namespace %q", namespace)
		}
	}
	return nil
}

// New returns the API handler. client carries out the operations.
func New(client *outbox.Client, config *Config) (*Handler, error) {
	if client == nil {
		return nil, errors.New("httpapi: client must not be nil")
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
		guard:            config.Guard,
		limiter:          config.RateLimiter,
		logger:           config.Logger,
		mcpServers:       maps.Clone(config.MCPServers),
		tokens:           slices.Clone(config.Tokens),
		waits:            config.Waits,
	}
	var err error
	tools := config.MCPTools
	if tools == nil {
		if tools, err = mcpserver.ToolsFor(client.Effects()); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
	}
	if h.effects, err = newEffectsAnswer(client.Effects(), tools); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}

	// Stateless: every request stands alone, so any replica of serve can
	// answer any request, and there is no session for another namespace's
	// token to take over.
	serverFor := func(r *http.Request) *mcp.Server {
		namespace, _ := namespaceFrom(r.Context())
		return h.mcpServers[namespace]
	}
	sdkHandler := mcp.NewStreamableHTTPHandler(serverFor, &mcp.StreamableHTTPOptions{
		Logger:              mcpserver.SDKLogger(h.logger),
		MaxRequestBodyBytes: BodyMax,
		Stateless:           true,
	})
	// A listen for task status notifications is answered by outbox, the
	// SDK knowing nothing of tasks; every other request reaches the SDK.
	mcpHandler := mcpserver.ListenHandler(sdkHandler, serverFor, &mcpserver.ListenHandlerOpts{MaxRequestBodyBytes: BodyMax})

	mux := http.NewServeMux()
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
	mux.Handle("GET /v1/effects", h.api(access.ActionRead, h.listEffects))
	mux.HandleFunc("GET /v1/openapi.json", h.openAPI)
	mux.Handle("POST /v1/intents", h.api(access.ActionEnqueue, h.limited(h.enqueue)))
	mux.Handle("GET /v1/intents", h.api(access.ActionRead, h.list))
	mux.Handle("GET /v1/intents/{key}", h.api(access.ActionRead, h.get))
	mux.Handle("POST /v1/intents/{key}/cancel", h.api(access.ActionCancel, h.cancel))
	mux.Handle("POST /v1/intents/{key}/resolve", h.api(access.ActionResolve, h.resolve))
	mux.Handle("POST /v1/intents/{key}/approve", h.api(access.ActionApprove, h.approve))
	mux.Handle("POST /v1/intents/{key}/deny", h.api(access.ActionDeny, h.deny))
	// The same paths with any other method, and any other path under /v1/,
	// answer in JSON too, after authentication: a caller without a token
	// learns nothing of which paths exist.
	mux.Handle("/v1/effects", h.api(access.ActionRead, methodNotAllowed("GET")))
	mux.Handle("/v1/intents", h.api(access.ActionRead, methodNotAllowed("GET, POST")))
	mux.Handle("/v1/intents/{key}", h.api(access.ActionRead, methodNotAllowed("GET, HEAD")))
	mux.Handle("/v1/intents/{key}/cancel", h.api(access.ActionRead, methodNotAllowed("POST")))
	mux.Handle("/v1/intents/{key}/resolve", h.api(access.ActionRead, methodNotAllowed("POST")))
	mux.Handle("/v1/intents/{key}/approve", h.api(access.ActionRead, methodNotAllowed("POST")))
	mux.Handle("/v1/intents/{key}/deny", h.api(access.ActionRead, methodNotAllowed("POST")))
	mux.Handle("/v1/", h.api(access.ActionRead, func(http.ResponseWriter, *http.Request, string) error {
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

// api authenticates a request, checks through package access that its
// token's role may take action, and runs fn for its namespace.
func (h *Handler) api(action access.Action, fn apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := h.authenticate(r)
		if err == nil && !access.Allow(p.role, action) {
			err = forbiddenRole(action.Role(), p.role)
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

// writeJSON writes v as the answer, with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client's connection is its own problem
}

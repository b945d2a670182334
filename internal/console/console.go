package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// Prefix is where the console is mounted: serve routes Prefix+"/" to it.
const Prefix = "/console"

// SessionTTLDefault is how long a sign-in lasts when Config.SessionTTL is
// not set: a working day, after which the operator enters the token again.
const SessionTTLDefault = 12 * time.Hour

// BulkLimit is the most intents one bulk cancel touches: a filter typed in
// haste must not cancel a whole backlog at once.
const BulkLimit = 1000

// RiverUIPathDefault is where serve mounts River UI, which the intent page
// links River's jobs to.
const RiverUIPathDefault = "/riverui"

// Config configures New.
type Config struct {
	// ApprovalTTL is how long an intent may await approval
	// (OUTBOX_APPROVAL_TTL), for the time left the approvals page shows.
	// Defaults to workers.ApprovalTTLDefault.
	ApprovalTTL time.Duration

	// AuthFailureFunc, when set, counts each refused sign-in, as the API's
	// refused tokens are counted. Defaults to none.
	AuthFailureFunc func()

	// Logger records sign-ins and refusals. Defaults to a logger that
	// discards.
	Logger *slog.Logger

	// Metrics is the process's registry, whose outbox_reconciled_total the
	// overview shows. Defaults to none: the overview then says so.
	Metrics prometheus.Gatherer

	// RiverUIPath is where River UI is mounted, for links to its job pages.
	// Defaults to RiverUIPathDefault.
	RiverUIPath string

	// Schema holds outbox's and River's tables. Defaults to
	// outbox.SchemaDefault.
	Schema string

	// SessionTTL is how long a sign-in lasts. Defaults to
	// SessionTTLDefault.
	SessionTTL time.Duration

	// TaskIDFunc, when set, returns the MCP task id of an intent
	// (mcpserver.TaskIDs.TaskID), which the intent's page shows for an
	// intent recorded over MCP. Defaults to none: the page shows no task.
	TaskIDFunc func(ctx context.Context, namespace string, intentID int64) (string, error)

	// Tokens are the API tokens (OUTBOX_API_TOKENS); operator and reader
	// tokens may sign in. Defaults to none.
	Tokens []access.Token

	// UIPassword and UIUser are River UI's basic-auth credentials: that
	// user signs in as operator over every namespace. Both empty means no
	// such user.
	UIPassword, UIUser string
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.ApprovalTTL == 0 {
		out.ApprovalTTL = workers.ApprovalTTLDefault
	}
	if out.AuthFailureFunc == nil {
		out.AuthFailureFunc = func() {}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.RiverUIPath == "" {
		out.RiverUIPath = RiverUIPathDefault
	}
	if out.Schema == "" {
		out.Schema = outbox.SchemaDefault
	}
	if out.SessionTTL == 0 {
		out.SessionTTL = SessionTTLDefault
	}
	return &out
}

// validate checks a config with its defaults.
func (c *Config) validate() error {
	if c.SessionTTL < 0 || c.ApprovalTTL < 0 {
		return errors.New("console: SessionTTL and ApprovalTTL must be positive")
	}
	if (c.UIUser == "") != (c.UIPassword == "") {
		return errors.New("console: UIUser and UIPassword go together")
	}
	return nil
}

// Handler serves the console under Prefix.
type Handler struct {
	approvalTTL time.Duration
	authFailed  func()
	client      *outbox.Client
	db          *queries
	logger      *slog.Logger
	metrics     prometheus.Gatherer
	mux         *http.ServeMux
	protect     *http.CrossOriginProtection
	riverUIPath string
	sessions    *sessionStore
	pages       map[string]*template.Template
	taskID      func(ctx context.Context, namespace string, intentID int64) (string, error)
	tokens      []access.Token
	uiPassword  string
	uiUser      string
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the console over pool, changing intents through client.
func New(pool *pgxpool.Pool, client *outbox.Client, config *Config) (*Handler, error) {
	if pool == nil || client == nil {
		return nil, errors.New("console: pool and client are required")
	}
	c := config.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h := &Handler{
		approvalTTL: c.ApprovalTTL,
		authFailed:  c.AuthFailureFunc,
		taskID:      c.TaskIDFunc,
		client:      client,
		db:          newQueries(pool, c.Schema),
		logger:      c.Logger,
		metrics:     c.Metrics,
		mux:         http.NewServeMux(),
		protect:     http.NewCrossOriginProtection(),
		riverUIPath: strings.TrimSuffix(c.RiverUIPath, "/"),
		sessions:    newSessionStore(c.SessionTTL),
		pages:       pages,
		tokens:      c.Tokens,
		uiPassword:  c.UIPassword,
		uiUser:      c.UIUser,
	}
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	static, _ := fs.Sub(staticFS, "static")
	h.mux.Handle("GET "+Prefix+"/static/", http.StripPrefix(Prefix+"/static/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET "+Prefix+"/login", h.loginPage)
	h.mux.HandleFunc("POST "+Prefix+"/login", h.login)
	h.mux.HandleFunc("GET "+Prefix+"/login/basic", h.loginBasic)
	h.mux.HandleFunc("POST "+Prefix+"/logout", h.logout)

	h.mux.HandleFunc("GET "+Prefix+"/{$}", h.signedIn(h.overview))
	h.mux.HandleFunc("GET "+Prefix+"/counts.json", h.signedIn(h.counts))
	h.mux.HandleFunc("GET "+Prefix+"/intents", h.signedIn(h.intents))
	h.mux.HandleFunc("GET "+Prefix+"/intents/{namespace}/{key}", h.signedIn(h.intent))
	h.mux.HandleFunc("POST "+Prefix+"/intents/{namespace}/{key}/{action}", h.signedIn(h.act))
	h.mux.HandleFunc("GET "+Prefix+"/unknown", h.signedIn(h.unknown))
	h.mux.HandleFunc("GET "+Prefix+"/approvals", h.signedIn(h.approvals))
	h.mux.HandleFunc("GET "+Prefix+"/bulk/cancel", h.signedIn(h.bulkPreview))
	h.mux.HandleFunc("POST "+Prefix+"/bulk/cancel", h.signedIn(h.bulkCancel))
	h.mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		h.renderError(w, r, nil, http.StatusNotFound, "not_found", "There is no such page in the console.")
	})
}

// ServeHTTP serves the console. Every request that may change something
// (a POST) passes CrossOriginProtection first: a browser sends the session
// cookie, or cached basic credentials, with any request a page makes, and
// SameSite=Strict alone does not cover a sibling site on another port.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	// The pages' only script and style are the console's own; no page may
	// be framed (a framed page can be clicked through), and no address,
	// which holds keys, leaks to another site in a Referer.
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	if err := h.protect.Check(r); err != nil {
		h.renderError(w, r, nil, http.StatusForbidden, "cross_origin_refused",
			"This request came from another site, or another origin, and was refused: the console changes nothing on another page's behalf.")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// render writes a page. The data pages are never cached: they show the
// state of intents, which changes, to whoever signed in.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, page string, data *pageData) {
	t, ok := h.pages[page]
	if !ok {
		panic("console: no page " + page)
	}
	if data.Flash == "" {
		data.Flash = flashes[r.URL.Query().Get("done")]
	}
	var buf strings.Builder
	if err := t.ExecuteTemplate(&buf, "layout", data); err != nil {
		h.logger.ErrorContext(r.Context(), "console page failed", "page", page, "error", err)
		http.Error(w, "internal error; the server's log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// errorView is the error page's data.
type errorView struct {
	Code    string
	Message string
	Back    string
}

// renderError answers with the error page: status, the code (an outbox
// error code where there is one) and what to do.
func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, p *principal, status int, code, message string) {
	back := Prefix + "/"
	if ns, key := r.PathValue("namespace"), r.PathValue("key"); ns != "" && key != "" {
		back = intentURL(ns, key)
	}
	h.render(w, r, status, "error", h.page(p, "Error: "+code, "", &errorView{Code: code, Message: message, Back: back}))
}

// renderOutboxError answers err from an outbox.Client call as the API's
// table has it (package apierror): its code and message for the caller's
// mistakes, a 500 for anything else (logged, never shown).
func (h *Handler) renderOutboxError(w http.ResponseWriter, r *http.Request, p *principal, err error) {
	problem := apierror.From(err, "key")
	if problem.Internal && r.Context().Err() == nil {
		h.logger.ErrorContext(r.Context(), "console request failed", "method", r.Method, "route", r.Pattern, "error", err)
	}
	msg := problem.Message
	if problem.Field != "" && !problem.Internal {
		msg = problem.Field + " " + msg
	}
	h.renderError(w, r, p, problem.Status, problem.Code, msg)
}

// pageData is what every page's layout gets.
type pageData struct {
	// Title is the page's title and first heading.
	Title string
	// Nav names the navigation entry of the page ("" for none).
	Nav string
	// User is who signed in; nil on the sign-in page.
	User *userView
	// Flash says what the last change did.
	Flash string
	// Data is the page's own.
	Data any
}

// userView is who signed in, as the pages show it.
type userView struct {
	Actor      string
	CanOperate bool
	Namespace  string
	Role       string
}

func (h *Handler) page(p *principal, title, nav string, data any) *pageData {
	d := &pageData{Title: title, Nav: nav, Data: data}
	if p != nil {
		d.User = &userView{Actor: p.actor(), CanOperate: p.role.Allows(access.RoleOperator), Namespace: p.namespace, Role: p.role.String()}
		if d.User.Namespace == "" {
			d.User.Namespace = "every namespace"
		}
	}
	return d
}

var pageNames = []string{"login", "error", "overview", "intents", "intent", "unknown", "approvals", "bulk"}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: error parsing page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

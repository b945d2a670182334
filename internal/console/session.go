package console

import (
	"crypto/rand"
	"crypto/sha256"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/outbox-dev/outbox/internal/access"
)

// sessionCookie names the console's session cookie. It carries only a
// random session id: the token stays on the server, in no cookie, so a
// cookie read off a disk or a proxy's log is not an API token.
const sessionCookie = "outbox_console"

// sessionsMax bounds the sessions kept. Past it, signing in evicts the
// session closest to its end: sign-ins need a valid token, so only the
// holders of tokens can fill it.
const sessionsMax = 10000

// principal is who a console request acts as.
type principal struct {
	// name is the token's fingerprint, the River UI user's name, or
	// access.ActorLocal: what access.ConsoleActor records.
	name string
	// namespace is the one namespace the principal sees, or "" for every
	// namespace (the River UI user, and loopback without credentials).
	namespace string
	role      access.Role
}

func (p *principal) actor() string { return access.ConsoleActor(p.name) }

// sees reports whether p may see intents of namespace. Another namespace's
// intent is answered as missing, as the API answers it.
func (p *principal) sees(namespace string) bool { return p.namespace == "" || p.namespace == namespace }

// sessionStore keeps the signed-in sessions in memory, by the SHA-256 of
// their id. A restart signs everyone out, and a session lives on the
// replica that made it: behind a load balancer, make the console's
// listener sticky or sign in on each (docs/operations.md).
type sessionStore struct {
	mu  sync.Mutex
	m   map[[sha256.Size]byte]*session
	ttl time.Duration
}

type session struct {
	expires time.Time
	p       principal
}

func newSessionStore(ttl time.Duration) *sessionStore {
	return &sessionStore{m: map[[sha256.Size]byte]*session{}, ttl: ttl}
}

// create stores a session for p and returns its id.
func (s *sessionStore) create(p principal) string {
	id := rand.Text() // 26 base32 characters: 130 bits
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= sessionsMax {
		var oldest [sha256.Size]byte
		var oldestAt time.Time
		for k, v := range s.m {
			if v.expires.Before(now) {
				delete(s.m, k)
			} else if oldestAt.IsZero() || v.expires.Before(oldestAt) {
				oldest, oldestAt = k, v.expires
			}
		}
		if len(s.m) >= sessionsMax {
			delete(s.m, oldest)
		}
	}
	s.m[sha256.Sum256([]byte(id))] = &session{expires: now.Add(s.ttl), p: p}
	return id
}

// get returns the session id's principal, if it is current.
func (s *sessionStore) get(id string) (principal, bool) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[key]
	if !ok {
		return principal{}, false
	}
	if time.Now().After(sess.expires) {
		delete(s.m, key)
		return principal{}, false
	}
	return sess.p, true
}

func (s *sessionStore) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sha256.Sum256([]byte(id)))
}

// authenticate returns who r acts as: its session; else the River UI user
// by basic auth; else, when no credentials of either kind are configured,
// a request through a loopback address with a loopback Host (River UI's
// rule, and the API's without tokens), as operator.
func (h *Handler) authenticate(r *http.Request) (principal, bool) {
	if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" {
		if p, ok := h.sessions.get(c.Value); ok {
			return p, true
		}
	}
	if p, ok := h.basicUser(r); ok {
		return p, true
	}
	if h.openMode() && access.FromLoopback(r) {
		return principal{name: access.ActorLocal, role: access.RoleOperator}, true
	}
	return principal{}, false
}

// openMode reports whether the console has nobody to sign in: no tokens and
// no River UI user, as in development (OUTBOX_ALLOW_NO_AUTH).
func (h *Handler) openMode() bool { return len(h.tokens) == 0 && h.uiUser == "" }

// basicUser checks r's basic credentials against the River UI user's.
func (h *Handler) basicUser(r *http.Request) (principal, bool) {
	if h.uiUser == "" || !access.BasicAuthMatches(r, h.uiUser, h.uiPassword) {
		return principal{}, false
	}
	return principal{name: h.uiUser, role: access.RoleOperator}, true
}

// signedIn runs page for a signed-in request, and sends any other to the
// sign-in page: never data.
func (h *Handler) signedIn(page func(http.ResponseWriter, *http.Request, *principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := h.authenticate(r)
		if !ok {
			next := r.URL.Path
			if r.Method == http.MethodGet && r.URL.RawQuery != "" {
				next += "?" + r.URL.RawQuery
			}
			if r.Method != http.MethodGet {
				// A form posted after the session ended is not carried out
				// after signing in: the page it came from is shown again.
				next = Prefix + "/"
			}
			http.Redirect(w, r, Prefix+"/login?next="+url.QueryEscape(next), http.StatusSeeOther)
			return
		}
		page(w, r, &p)
	}
}

// loginView is the sign-in page's data.
type loginView struct {
	Basic   bool
	Message string
	Next    string
	Open    bool
}

// safeNext keeps a post-sign-in destination inside the console, so that
// the sign-in page cannot be made to send anyone elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "/"
	}
	return next
}

func (h *Handler) loginView(r *http.Request, msg string) *loginView {
	return &loginView{Basic: h.uiUser != "", Message: msg, Next: safeNext(r.FormValue("next")), Open: h.openMode() && access.FromLoopback(r)}
}

// loginPage is GET /console/login.
func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, "login", h.page(nil, "Sign in", "", h.loginView(r, "")))
}

// login is POST /console/login: an operator's or a reader's API token, kept
// on the server behind a session cookie.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, formMax)
	secret := strings.TrimSpace(r.PostFormValue("token"))
	t, ok := access.Match(h.tokens, secret)
	if !ok || secret == "" {
		h.refuseLogin(w, r, http.StatusUnauthorized, "unknown token", "That token is not one of this server's API tokens.")
		return
	}
	if t.Role != access.RoleOperator && t.Role != access.RoleReader {
		h.refuseLogin(w, r, http.StatusForbidden, "agent token", "This is an agent's token: the console is for operators and readers. Sign in with an operator or reader token.")
		return
	}
	h.startSession(w, r, principal{name: t.Fingerprint(), namespace: t.Namespace, role: t.Role})
}

// loginBasic is GET /console/login/basic: the River UI user, by the
// browser's basic-auth prompt, gets a session as operator.
func (h *Handler) loginBasic(w http.ResponseWriter, r *http.Request) {
	p, ok := h.basicUser(r)
	if !ok {
		if _, _, sent := r.BasicAuth(); sent {
			h.authFailed()
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="outbox console", charset="UTF-8"`)
		h.render(w, r, http.StatusUnauthorized, "login", h.page(nil, "Sign in", "", h.loginView(r, "The River UI user and password (OUTBOX_UI_USER, OUTBOX_UI_PASSWORD) are required.")))
		return
	}
	h.startSession(w, r, p)
}

func (h *Handler) refuseLogin(w http.ResponseWriter, r *http.Request, status int, reason, msg string) {
	h.authFailed()
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	// The reason, never what was entered.
	h.logger.WarnContext(r.Context(), "console sign-in refused", "remote_addr", host, "reason", reason)
	h.render(w, r, status, "login", h.page(nil, "Sign in", "", h.loginView(r, msg)))
}

func (h *Handler) startSession(w http.ResponseWriter, r *http.Request, p principal) {
	id := h.sessions.create(p)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: Prefix + "/",
		MaxAge: int(h.sessions.ttl / time.Second), Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	h.logger.InfoContext(r.Context(), "console sign-in", "by", p.actor(), "role", p.role.String(), "namespace", p.namespace)
	// safeNext keeps only a path under /console/ (tested): never another site.
	http.Redirect(w, r, safeNext(r.FormValue("next")), http.StatusSeeOther) //nolint:gosec // see above
}

// logout is POST /console/logout.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		h.sessions.delete(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: Prefix + "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

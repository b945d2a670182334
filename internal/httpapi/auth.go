package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/outbox"
)

// CodeUnauthorized answers a request without a known bearer token (401).
// One the API refuses whatever its token (403: a cross-origin request from
// a browser, or, without tokens, a request that did not come through a
// loopback address) is outbox.CodeForbidden.
const CodeUnauthorized = "unauthorized"

// principal is who a request acts as: its namespace, its role, and the
// token's fingerprint (access.ActorLocal without tokens), which names it in
// rate limits and, as access.APIActor, in the record.
type principal struct {
	namespace string
	role      access.Role
	name      string
}

type principalKey struct{}

// withPrincipal records the request's principal, for /mcp's server lookup
// and the tools' role checks.
func withPrincipal(ctx context.Context, p principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalFrom(ctx context.Context) (principal, bool) {
	p, ok := ctx.Value(principalKey{}).(principal)
	return p, ok
}

// namespaceFrom returns the request's namespace, for /mcp's server lookup.
func namespaceFrom(ctx context.Context) (string, bool) {
	p, ok := principalFrom(ctx)
	return p.namespace, ok
}

// actor names the request's token for the record: access.APIActor of its
// fingerprint, never the token ("api:local" without tokens).
func actor(r *http.Request) string {
	p, _ := principalFrom(r.Context())
	return access.APIActor(p.name)
}

// forbiddenRole is the answer to a token whose role may not do what the
// request asks: 403 forbidden, naming the role needed.
func forbiddenRole(need, have access.Role) error {
	return &apiError{status: http.StatusForbidden, code: outbox.CodeForbidden, field: "Authorization",
		message: fmt.Sprintf("this requires the role %s or above; the token's role is %s", need, have)}
}

// authenticate returns who r acts as: its bearer token's namespace and role,
// or, with no token configured, namespace default as operator for a request
// that came through a loopback address with a loopback Host (serve refuses
// to run without tokens unless told to, and then only on loopback; the Host
// check stops a web page that rebinds its own DNS name to 127.0.0.1 from
// calling the API).
func (h *Handler) authenticate(r *http.Request) (principal, error) {
	p, err := h.authenticateToken(r)
	if err != nil {
		h.authFailed(r, err)
	}
	return p, err
}

// authFailed counts a refused request (AuthFailureFunc) and logs it at
// most once a second per remote address, so that a client stuck on a bad
// token, or someone guessing, cannot flood the logs. The log names the
// address and the reason, never what was presented.
func (h *Handler) authFailed(r *http.Request, err error) {
	if h.authFailureFunc != nil {
		h.authFailureFunc()
	}
	host, _, splitErr := net.SplitHostPort(r.RemoteAddr)
	if splitErr != nil {
		host = r.RemoteAddr
	}
	now := time.Now()
	h.authLogMu.Lock()
	last, seen := h.authLogged[host]
	logIt := !seen || now.Sub(last) >= time.Second
	if logIt {
		if len(h.authLogged) >= authLogMax {
			for k, t := range h.authLogged {
				if now.Sub(t) >= time.Second {
					delete(h.authLogged, k)
				}
			}
		}
		if len(h.authLogged) < authLogMax {
			h.authLogged[host] = now
		}
	}
	h.authLogMu.Unlock()
	if logIt {
		msg := err.Error()
		var ae *apiError
		if errors.As(err, &ae) {
			msg = ae.message
		}
		h.logger.WarnContext(r.Context(), "API authentication failed", "remote_addr", host, "route", r.URL.Path, "reason", msg)
	}
}

// authLogMax bounds the addresses authFailed remembers; beyond it (a
// spray from many addresses) every failure is logged until old entries
// expire, which is the rate at which they arrive anyway.
const authLogMax = 10000

func (h *Handler) authenticateToken(r *http.Request) (principal, error) {
	if len(h.tokens) == 0 {
		if !access.ViaLoopback(r) {
			return principal{}, &apiError{status: http.StatusForbidden, code: outbox.CodeForbidden,
				message: "without OUTBOX_API_TOKENS the API answers only on a loopback address"}
		}
		if !access.IsLoopbackAddr(r.Host) {
			return principal{}, &apiError{status: http.StatusForbidden, code: outbox.CodeForbidden,
				message: "without OUTBOX_API_TOKENS the API answers only requests whose Host is a loopback address"}
		}
		return principal{namespace: h.defaultNamespace, role: access.RoleOperator, name: access.ActorLocal}, nil
	}
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return principal{}, unauthorized("missing bearer token: send the header Authorization: Bearer <token>")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
	token = strings.TrimSpace(token)
	if len(values) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return principal{}, unauthorized("the Authorization header must be one Bearer <token>")
	}
	t, ok := access.Match(h.tokens, token)
	if !ok {
		return principal{}, unauthorized("unknown bearer token")
	}
	return principal{namespace: t.Namespace, role: t.Role, name: t.Fingerprint()}, nil
}

func unauthorized(msg string) error {
	return &apiError{status: http.StatusUnauthorized, code: CodeUnauthorized, message: msg}
}

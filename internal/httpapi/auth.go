package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// CodeUnauthorized answers a request without a known bearer token (401), and
// CodeForbidden one the API refuses whatever its token (403): a cross-origin
// request from a browser, or, without tokens, a request that did not come
// through a loopback address.
const (
	CodeForbidden    = "forbidden"
	CodeUnauthorized = "unauthorized"
)

// tokenEntry is one configured token, kept as its SHA-256 so that every
// comparison is between two 32-byte values: the time it takes tells nothing
// of either token's length or content.
type tokenEntry struct {
	hash      [sha256.Size]byte
	namespace string
}

type namespaceKey struct{}

// withNamespace records the request's namespace, for /mcp's server lookup.
func withNamespace(ctx context.Context, namespace string) context.Context {
	return context.WithValue(ctx, namespaceKey{}, namespace)
}

func namespaceFrom(ctx context.Context) (string, bool) {
	ns, ok := ctx.Value(namespaceKey{}).(string)
	return ns, ok
}

// authenticate returns the namespace r acts for: its bearer token's, or,
// with no token configured, the default namespace for a request that came
// through a loopback address with a loopback Host (serve refuses to listen
// elsewhere without tokens; the Host check stops a web page that rebinds its
// own DNS name to 127.0.0.1 from calling the API).
func (h *Handler) authenticate(r *http.Request) (string, error) {
	if len(h.tokens) == 0 {
		if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && !IsLoopbackAddr(addr.String()) {
			return "", &apiError{status: http.StatusForbidden, code: CodeForbidden,
				message: "without OUTBOX_API_TOKENS the API answers only on a loopback address"}
		}
		if !IsLoopbackAddr(r.Host) {
			return "", &apiError{status: http.StatusForbidden, code: CodeForbidden,
				message: "without OUTBOX_API_TOKENS the API answers only requests whose Host is a loopback address"}
		}
		return h.defaultNamespace, nil
	}
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return "", unauthorized("missing bearer token: send the header Authorization: Bearer <token>")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
	token = strings.TrimSpace(token)
	if len(values) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", unauthorized("the Authorization header must be one Bearer <token>")
	}
	presented := sha256.Sum256([]byte(token))
	namespace := ""
	// Every entry is compared, match or not, so that the time taken depends
	// only on the number of tokens configured.
	for i := range h.tokens {
		if subtle.ConstantTimeCompare(presented[:], h.tokens[i].hash[:]) == 1 {
			namespace = h.tokens[i].namespace
		}
	}
	if namespace == "" {
		return "", unauthorized("unknown bearer token")
	}
	return namespace, nil
}

func unauthorized(msg string) error {
	return &apiError{status: http.StatusUnauthorized, code: CodeUnauthorized, message: msg}
}

// IsLoopbackAddr reports whether hostport (or a bare host) names a loopback
// address: localhost, 127.0.0.0/8 or ::1.
func IsLoopbackAddr(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

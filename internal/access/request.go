package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

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

// ViaLoopback reports whether r reached the server on a loopback address
// (true when the server did not record the address, as a handler called
// outside net/http's server sees).
func ViaLoopback(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return !ok || IsLoopbackAddr(addr.String())
}

// FromLoopback reports whether r came through a loopback address with a
// loopback Host: what a server without credentials answers (River UI's
// rule). The Host check stops a page that rebinds its own DNS name to
// 127.0.0.1.
func FromLoopback(r *http.Request) bool { return ViaLoopback(r) && IsLoopbackAddr(r.Host) }

// BasicAuthMatches reports whether r's basic credentials are user and
// password. They are compared as SHA-256 sums, both whatever the first's
// outcome, so that the time taken tells nothing of either value or its
// length.
func BasicAuthMatches(r *http.Request, user, password string) bool {
	gotUser, gotPassword, ok := r.BasicAuth()
	gu, gp := sha256.Sum256([]byte(gotUser)), sha256.Sum256([]byte(gotPassword))
	wu, wp := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	match := subtle.ConstantTimeCompare(gu[:], wu[:]) & subtle.ConstantTimeCompare(gp[:], wp[:])
	return ok && match == 1
}

package effectfile

import (
	"net"
)

// IsLoopback reports whether host is localhost or a loopback address: the
// hosts a plain http URL, the sandbox and the demo may reach.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

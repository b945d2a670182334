package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/internal/mcpserver"
)

// TestHTTPTimeouts checks that serve's write timeout leaves room for the
// longest wait the API and /mcp accept, and that slow clients are bounded.
func TestHTTPTimeouts(t *testing.T) {
	t.Parallel()

	require.Greater(t, httpWriteTimeout, httpapi.WaitMax+httpReadTimeout/2)
	require.Greater(t, httpWriteTimeout, mcpserver.WaitMax+httpReadTimeout/2)
	for _, d := range []any{httpIdleTimeout, httpReadHeaderTimeout, httpReadTimeout} {
		require.NotZero(t, d)
	}
}

func TestLoopbackListenAddr(t *testing.T) {
	t.Parallel()

	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true,
		"127.1.2.3:0":    true,
		"[::1]:8080":     true,
		"localhost:8080": true,
		"LOCALHOST:8080": true,
		":8080":          false,
		"0.0.0.0:8080":   false,
		"[::]:8080":      false,
		"10.0.0.5:8080":  false,
		"example.com:80": false,
		"garbage":        false,
	} {
		require.Equal(t, want, loopbackListenAddr(addr), addr)
	}
}

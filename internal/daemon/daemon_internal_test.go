package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/internal/mcpserver"
)

// TestHTTPTimeouts checks that the write timeout leaves room for the longest
// wait the API and /mcp accept, and that slow clients are bounded.
func TestHTTPTimeouts(t *testing.T) {
	t.Parallel()

	require.Greater(t, HTTPWriteTimeout, httpapi.WaitMax+HTTPReadTimeout/2)
	require.Greater(t, HTTPWriteTimeout, mcpserver.WaitMax+HTTPReadTimeout/2)
	for _, d := range []any{HTTPIdleTimeout, HTTPReadHeaderTimeout, HTTPReadTimeout} {
		require.NotZero(t, d)
	}
}

func TestLoopbackHost(t *testing.T) {
	t.Parallel()

	for host, want := range map[string]bool{
		"127.0.0.1:8080": true,
		"127.0.0.1":      true,
		"[::1]:8080":     true,
		"localhost":      true,
		"10.0.0.5:8080":  false,
		"example.com":    false,
	} {
		require.Equal(t, want, LoopbackHost(host), host)
	}
}

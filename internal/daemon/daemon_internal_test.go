package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/apierror"
)

// TestHTTPTimeouts checks that the write timeout leaves room for the longest
// wait the API and /mcp accept, and that slow clients are bounded.
func TestHTTPTimeouts(t *testing.T) {
	t.Parallel()

	require.Greater(t, HTTPWriteTimeout, apierror.WaitMax+HTTPReadTimeout/2)
	require.Greater(t, HTTPWriteTimeout, apierror.WaitMax+HTTPReadTimeout/2)
	for _, d := range []any{HTTPIdleTimeout, HTTPReadHeaderTimeout, HTTPReadTimeout} {
		require.NotZero(t, d)
	}
}

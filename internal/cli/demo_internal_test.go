package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/httpapi"
)

func TestDemoToken(t *testing.T) {
	t.Parallel()

	token, ns := demoToken(nil)
	require.Empty(t, token)
	require.Equal(t, "default", ns)

	tok := func(secret, ns string, role httpapi.Role) httpapi.Token { return httpapi.NewToken(secret, ns, role) }
	token, ns = demoToken([]httpapi.Token{tok("b-token-0123456789", "billing", httpapi.RoleAgent), tok("c-token-0123456789", "default", httpapi.RoleOperator)})
	require.Equal(t, "c-token-0123456789", token)
	require.Equal(t, "default", ns)

	// A reader cannot enqueue: the first agent's token.
	token, ns = demoToken([]httpapi.Token{tok("r-token-0123456789", "default", httpapi.RoleReader), tok("a-token-0123456789", "agents", httpapi.RoleAgent)})
	require.Equal(t, "a-token-0123456789", token)
	require.Equal(t, "agents", ns)
}

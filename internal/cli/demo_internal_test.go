package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
)

func TestDemoToken(t *testing.T) {
	t.Parallel()

	token, ns := demoToken(nil)
	require.Empty(t, token)
	require.Equal(t, "default", ns)

	tok := func(secret, ns string, role access.Role) access.Token { return access.NewToken(secret, ns, role) }
	token, ns = demoToken([]access.Token{tok("b-token-0123456789", "billing", access.RoleAgent), tok("c-token-0123456789", "default", access.RoleOperator)})
	require.Equal(t, "c-token-0123456789", token)
	require.Equal(t, "default", ns)

	// A reader cannot enqueue: the first agent's token.
	token, ns = demoToken([]access.Token{tok("r-token-0123456789", "default", access.RoleReader), tok("a-token-0123456789", "agents", access.RoleAgent)})
	require.Equal(t, "a-token-0123456789", token)
	require.Equal(t, "agents", ns)
}

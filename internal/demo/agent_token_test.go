package demo_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/demo"
)

func TestAgentToken(t *testing.T) {
	t.Parallel()

	token, ns := demo.AgentToken(nil)
	require.Empty(t, token)
	require.Equal(t, "default", ns)

	tok := func(secret, ns string, role access.Role) access.Token { return access.NewToken(secret, ns, role) }
	token, ns = demo.AgentToken([]access.Token{tok("b-token-0123456789", "billing", access.RoleAgent), tok("c-token-0123456789", "default", access.RoleOperator)})
	require.Equal(t, "c-token-0123456789", token)
	require.Equal(t, "default", ns)

	// A reader cannot enqueue: the first agent's token.
	token, ns = demo.AgentToken([]access.Token{tok("r-token-0123456789", "default", access.RoleReader), tok("a-token-0123456789", "agents", access.RoleAgent)})
	require.Equal(t, "a-token-0123456789", token)
	require.Equal(t, "agents", ns)
}

package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDemoToken(t *testing.T) {
	t.Parallel()

	token, ns := demoToken(nil)
	require.Empty(t, token)
	require.Equal(t, "default", ns)

	token, ns = demoToken(map[string]string{"b": "billing", "a": "agents", "c": "default"})
	require.Equal(t, "c", token)
	require.Equal(t, "default", ns)

	token, ns = demoToken(map[string]string{"b": "billing", "a": "agents"})
	require.Equal(t, "a", token)
	require.Equal(t, "agents", ns)
}

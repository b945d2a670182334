package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
)

func TestStates(t *testing.T) {
	t.Parallel()

	states := outbox.States()
	require.Equal(t, []outbox.State{"awaiting_approval", "pending", "running", "succeeded", "failed", "unknown", "cancelled"}, states)
	for i, s := range states {
		require.True(t, s.Valid(), s)
		require.Equal(t, i >= 3, s.Terminal(), s)
	}
	require.False(t, outbox.State("done").Valid())

	states[0] = "changed"
	require.Equal(t, outbox.StateAwaitingApproval, outbox.States()[0], "each call returns a new slice")
}

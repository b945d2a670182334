package riverworker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPastWindow(t *testing.T) {
	t.Parallel()

	day := 24 * time.Hour
	require.False(t, pastWindow(0, day))
	require.False(t, pastWindow(22*time.Hour, day))
	require.True(t, pastWindow(23*time.Hour+time.Minute, day), "within the last hour of Stripe's 24")
	require.True(t, pastWindow(25*time.Hour, day))
}

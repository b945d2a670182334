package worker

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

func TestProviderObjectID(t *testing.T) {
	t.Parallel()

	for result, want := range map[string]string{
		`{"id": "pi_123", "status": "succeeded"}`:            "pi_123",
		`{"ticket_id": 42, "url": "https://z/42"}`:           "42",
		`{"message_id": "<obx_1@x>"}`:                        "<obx_1@x>",
		`{"status": 200}`:                                    "",
		`{"b_id": "second", "a_id": "first"}`:                "first",
		`{"id": {"nested": true}, "payment_intent_id": "p"}`: "p",
		`not json`: "",
		``:         "",
	} {
		require.Equal(t, want, providerObjectID([]byte(result)), result)
	}
}

package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/cli"
	"github.com/outbox-dev/outbox/internal/httpapi"
)

func TestParseRateLimit(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]httpapi.RateLimit{
		"":      {},
		"off":   {},
		"0":     {},
		"10":    {PerSecond: 10, Burst: 10},
		"0.5":   {PerSecond: 0.5, Burst: 1},
		"0.5:5": {PerSecond: 0.5, Burst: 5},
		" 2:3 ": {PerSecond: 2, Burst: 3},
	} {
		got, err := cli.ParseRateLimit(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"-1", "abc", "NaN", "Inf", "1:0", "1:-2", "1:x", "1:2:3", ":5"} {
		_, err := cli.ParseRateLimit(in)
		require.Error(t, err, in)
	}
}

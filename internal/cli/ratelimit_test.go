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
	for in, want := range map[string]string{
		"-1": `the rate "-1"`, "abc": `the rate "abc"`, "NaN": `the rate "NaN"`, "Inf": `the rate "Inf"`, ":5": `the rate ""`,
		"1:0": `the burst "0"`, "1:-2": `the burst "-2"`, "1:x": `the burst "x"`, "1:2:3": `the burst "2:3"`,
	} {
		_, err := cli.ParseRateLimit(in)
		require.ErrorContains(t, err, want, in)
	}
}

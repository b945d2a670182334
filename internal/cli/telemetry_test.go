package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testrun"
)

// TestServeVersionEverywhere: outbox_build_info's version is the one on
// serve's "outboxd serving" line (and the one telemetry.Resource gives the
// traces, tested there), so that logs, metrics and traces join on it.
func TestServeVersionEverywhere(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	srv := testrun.Serve(t, bundle.env)
	info := scrape(t, srv.Addr)["outbox_build_info"].GetMetric()
	require.Len(t, info, 1)
	var version string
	for _, l := range info[0].GetLabel() {
		if l.GetName() == "version" {
			version = l.GetValue()
		}
	}
	require.NotEmpty(t, version)
	require.Equal(t, 0, srv.Stop())

	serving := 0
	for _, line := range strings.Split(strings.TrimSpace(srv.Logs()), "\n") {
		var record map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &record), line)
		if record["msg"] == "outboxd serving" {
			serving++
			require.Equal(t, version, record["version"], line)
		}
		// Traces are off by default: no line names a trace.
		require.NotContains(t, record, "trace_id", line)
	}
	require.Equal(t, 1, serving)
}

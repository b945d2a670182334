package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
)

// BenchmarkUpstreamCall measures what recording a call costs against
// calling the same upstream (the test upstream over HTTP) straight: the
// latency of a call's answer, p50 and p99, direct and recorded (answered at
// the upstream's wait, once the intent succeeded). Run:
//
//	go test ./integration -run '^$' -bench UpstreamCall -benchtime 300x
func BenchmarkUpstreamCall(b *testing.B) {
	state := b.TempDir()
	url, _ := startHTTPUpstream(b, state, freeAddr(b))
	file := filepath.Join(b.TempDir(), "effects.yaml")
	require.NoError(b, os.WriteFile(file, []byte(upstreamsHTTPFile), 0o600))
	u := newEnv(b, "OUTBOX_EFFECTS_FILE="+file, "NOTES_URL="+url, "OUTBOX_EFFECT_TIMEOUT=5s")
	_, stderr, code := u.run("effects", "pin", file)
	require.Equal(b, 0, code, stderr)
	p := u.serve()

	connect := func(endpoint string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	run := func(b *testing.B, s *mcp.ClientSession, tool string, key bool) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			args := map[string]any{"to": "bench", "text": fmt.Sprintf("m%d-%d", time.Now().UnixNano(), i)}
			if key {
				args["idempotency_key"] = fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
			} else {
				args["idempotencyKey"] = fmt.Sprintf("direct-%d-%d", time.Now().UnixNano(), i)
			}
			start := time.Now()
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
			lat = append(lat, time.Since(start))
			require.NoError(b, err)
			require.False(b, res.IsError)
			if key {
				var a toolAnswer
				raw, _ := json.Marshal(res.StructuredContent)
				require.NoError(b, json.Unmarshal(raw, &a))
				require.Equal(b, outbox.StateSucceeded, a.State, "answered at the wait, once succeeded")
			}
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.Run("Direct", func(b *testing.B) { run(b, connect(url), "send_message", false) })
	b.Run("Recorded", func(b *testing.B) { run(b, connect("http://"+p.addr+"/mcp"), "notes_send_message", true) })
}

package upstream_test

import (
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects/declared"

	"github.com/outbox-dev/outbox/internal/upstream"
)

// bindListed parses file, pins it against listed (no upstream needed) and
// binds it.
func bindListed(t *testing.T, file string, lookupEnv func(string) (string, bool), listed []*mcp.Tool) *upstream.Catalog {
	t.Helper()
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnv: lookupEnv})
	require.NoError(t, err)
	lock := &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{}}
	for _, u := range f.Upstreams {
		entry, problems := u.Pin(u.Name()+" 1.0", listed, nil)
		require.Empty(t, problems)
		lock.Upstreams[u.Name()] = entry
	}
	c, err := upstream.Bind(f, lock, &upstream.BindConfig{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func recordedTool(t *testing.T, c *upstream.Catalog, name string) *upstream.Tool {
	t.Helper()
	for _, r := range c.Recorded {
		if r.Name() == name {
			return r
		}
	}
	require.FailNow(t, "no recorded tool "+name)
	return nil
}

// A key_arg tool's dedupe window leaves room for the call's own timeout,
// as a declared HTTP effect's does: a call sent at the window's last
// moment may reach the upstream a timeout later.
func TestUpstreamDedupeWindowLessTimeout(t *testing.T) {
	t.Parallel()
	file := pinFile + "    timeout: 20s\n"
	c := bindListed(t, file, upstreamEnv, []*mcp.Tool{
		listedTool("create_issue", `{"type":"object","required":["repo","title"],"properties":{"repo":{"type":"string"},"title":{"type":"string"},"body":{"type":"string"}}}`, false),
		listedTool("list_issues", `{"type":"object","properties":{"repo":{"type":"string"}}}`, true),
		listedTool("send", `{"type":"object","properties":{"to":{"type":"string"},"idempotencyKey":{"type":"string"}}}`, false),
	})
	require.Equal(t, 24*time.Hour-20*time.Second, recordedTool(t, c, "gh_send").DedupeWindow())
}

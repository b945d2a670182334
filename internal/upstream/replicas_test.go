package upstream_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/upstream"
)

// Replicas agree on an upstream's lock: the last started one records its
// own, and a running replica whose lock differs from the recorded one
// holds the upstream's queue (says so, and counts it) until the recorded
// lock is its own again.
func TestUpstreamReplicasAgree(t *testing.T) {
	t.Parallel()
	pool, schema := testdb.MigratedSchema(t)
	queries := intentdb.New(schema)
	f, err := upstream.ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    url: \"http://127.0.0.1:9/mcp\"\n"), &declared.Config{})
	require.NoError(t, err)
	u := f.Upstreams[0]
	bind := func(schemaJSON string) *upstream.Catalog {
		entry, problems := u.Pin("srv", []*mcp.Tool{{Name: "write", InputSchema: json.RawMessage(schemaJSON)}}, nil)
		require.Empty(t, problems)
		c, err := upstream.Bind(f, &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{"up": entry}}, nil)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	older := bind(`{"type":"object"}`)
	newer := bind(`{"type":"object","properties":{"text":{"type":"string"}}}`)
	require.NotEqual(t, older.LockSHA256s()["up"], newer.LockSHA256s()["up"])

	var mu sync.Mutex
	heldNow := map[*upstream.Catalog]bool{}
	agree := func(c *upstream.Catalog) {
		require.NoError(t, c.Agree(context.Background(), pool, queries, &upstream.AgreeConfig{
			Interval: 50 * time.Millisecond,
			ObserveHeldFunc: func(name string, held bool) {
				require.Equal(t, "up", name)
				mu.Lock()
				heldNow[c] = held
				mu.Unlock()
			},
		}))
	}
	isHeld := func(c *upstream.Catalog) bool {
		mu.Lock()
		defer mu.Unlock()
		return heldNow[c]
	}

	agree(older)
	require.Empty(t, older.HeldQueue("upstream_up"), "the first replica's lock is recorded")
	time.Sleep(200 * time.Millisecond)
	require.Empty(t, older.Held())

	// A replica started with a re-pinned lock: its lock is the one in
	// force, and the older replica stops working the queue.
	agree(newer)
	require.Empty(t, newer.HeldQueue("upstream_up"))
	require.Eventually(t, func() bool { return older.HeldQueue("upstream_up") != "" }, 5*time.Second, 20*time.Millisecond)
	require.Contains(t, older.Held()["up"], "differs from the one recorded")
	require.Empty(t, older.HeldQueue("upstream_other"), "only the upstream's own queue")
	require.True(t, isHeld(older))
	require.False(t, isHeld(newer))

	// The older replica restarted with the new lock: both work the queue.
	restarted := bind(`{"type":"object","properties":{"text":{"type":"string"}}}`)
	agree(restarted)
	time.Sleep(200 * time.Millisecond)
	require.Empty(t, newer.Held())
	require.Empty(t, restarted.Held())
	require.False(t, isHeld(newer))
}

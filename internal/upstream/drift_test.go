package upstream_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/upstream"
)

// A tool that differs from its pin, or is gone, is withdrawn: its calls
// wait not_sent with upstream_drift (or upstream_tool_missing), and the
// tool is back once the upstream lists it as pinned again.
func TestUpstreamDrift(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := mcp.NewServer(&mcp.Implementation{Name: "drifting", Version: "1"}, nil)
	pinned := &mcp.Tool{Name: "write", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}
	handler := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	srv.AddTool(pinned, handler)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)

	file := "upstreams:\n  up:\n    url: \"{env.URL}\"\n    refresh: 1s\n    connect_timeout: 2s\n"
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnv: func(n string) (string, bool) {
		return hs.URL, n == "URL"
	}})
	require.NoError(t, err)
	u := f.Upstreams[0]
	conn := upstream.NewConn(u, nil)
	server, listed, err := conn.ListTools(context.Background())
	conn.Close()
	require.NoError(t, err)
	entry, problems := u.Pin(server, listed, nil)
	require.Empty(t, problems)
	lock := &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{"up": entry}}

	var drifts atomic.Int32
	c, err := upstream.Bind(f, lock, &upstream.BindConfig{ObserveDriftFunc: func(string, string) { drifts.Add(1) }})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.Len(t, c.Recorded, 1)
	tool := c.Recorded[0]
	require.Equal(t, "up_write", tool.Name())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.Start(ctx)

	req := &effects.Request{Args: json.RawMessage(`{"text":"a"}`), ProviderKey: "pk"}
	_, err = tool.Execute(context.Background(), req)
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load())

	// The upstream changes the tool under the same name.
	srv.RemoveTools("write")
	srv.AddTool(&mcp.Tool{Name: "write", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"to":{"type":"string"}}}`)}, handler)
	require.Eventually(t, func() bool { return tool.Withdrawn() == upstream.CodeUpstreamDrift }, 10*time.Second, 50*time.Millisecond)
	_, err = tool.Execute(context.Background(), req)
	class, code := effects.Classify(err)
	require.Equal(t, effects.ClassNotSent, class)
	require.Equal(t, upstream.CodeUpstreamDrift, code)
	require.EqualValues(t, 1, calls.Load(), "a drifted tool is never called")
	require.Positive(t, drifts.Load())

	// Gone, then back as pinned.
	srv.RemoveTools("write")
	require.Eventually(t, func() bool { return tool.Withdrawn() == upstream.CodeUpstreamToolMissing }, 10*time.Second, 50*time.Millisecond)
	srv.AddTool(pinned, handler)
	require.Eventually(t, func() bool { return tool.Withdrawn() == "" }, 10*time.Second, 50*time.Millisecond)
	_, err = tool.Execute(context.Background(), req)
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load())
}

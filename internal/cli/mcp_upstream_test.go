package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/cli"
)

// httpUpstream is an MCP server over streamable HTTP on loopback with one
// read-only tool, read, that the test may change under the same name.
func httpUpstream(t *testing.T) (*mcp.Server, string) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "drifting", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "read", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, readHandler)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

func readHandler(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "read"}}}, nil
}

// mcpInProcess runs outboxd mcp in this process with env, its stdio piped
// to an SDK client, and returns the client's session.
func mcpInProcess(t *testing.T, env map[string]string) *mcp.ClientSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"mcp"}, &cli.RunOpts{
			Lookuper: envconfig.MapLookuper(env), Stdin: inR, Stdout: outW, Stderr: io.Discard,
		})
		_ = outW.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		<-done
	})
	return cs
}

// outboxd mcp compares the upstreams' listings with the lock as serve
// does: a tool the upstream changed under the same name after it was
// pinned is withdrawn, no longer listed.
func TestMCPUpstreamDrift(t *testing.T) {
	t.Parallel()
	bundle := setup(t)
	srv, url := httpUpstream(t)
	file := writeFile(t, "effects.yaml", "upstreams:\n  up:\n    url: \"{env.UP_URL}\"\n    connect_timeout: 2s\n")
	env := with(bundle.env, "UP_URL", url, "OUTBOX_EFFECTS_FILE", file)
	res := runEnv(t, env, nil, "effects", "pin", file)
	require.Equal(t, 0, res.code, res.stderr)

	listed := func(cs *mcp.ClientSession) bool {
		tools, err := cs.ListTools(t.Context(), nil)
		require.NoError(t, err)
		return slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "up_read" })
	}
	cs := mcpInProcess(t, env)
	require.True(t, listed(cs), "pinned as listed: mirrored")
	require.NoError(t, cs.Close())

	// The upstream changes the tool under the same name.
	srv.RemoveTools("read")
	srv.AddTool(&mcp.Tool{Name: "read", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"},"all":{"type":"boolean"}}}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, readHandler)
	cs = mcpInProcess(t, env)
	require.Eventually(t, func() bool { return !listed(cs) }, 10*time.Second, 100*time.Millisecond, "a drifted tool is withdrawn")
}

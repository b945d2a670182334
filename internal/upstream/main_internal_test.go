package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/testdb"
)

// childEnv, set in a process's environment, makes the test binary an MCP
// server on stdio: the stdio upstream of the tests (a real child process).
const childEnv = "OUTBOX_UPSTREAM_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	// The database, for the tests of replicas agreeing on a lock.
	testdb.Main(m)
}

// runChild serves the test child's tools on stdio until stdin ends:
// write answers at once; slow_start (in the variable's value) delays the
// handshake; stderr writes a line of the given length to stderr first.
func runChild() {
	if d, err := time.ParseDuration(os.Getenv(childEnv)); err == nil {
		time.Sleep(d)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "child", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "write", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"stderr":{"type":"integer"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Text   string
				Stderr int
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			if args.Stderr > 0 {
				fmt.Fprintln(os.Stderr, strings.Repeat("e", args.Stderr))
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "wrote " + args.Text}}}, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}

// childFile declares the test binary as a stdio upstream; CHILD is the
// value of childEnv in its environment.
func childFile(extra string) string {
	return "upstreams:\n  up:\n    command: [" + os.Args[0] + "]\n    inherit: []\n    env: {" + childEnv + ": \"{env.CHILD}\"}\n" + extra
}

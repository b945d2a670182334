package cli_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// TestMCPStdio drives the real outboxd binary's mcp command over stdio with
// the SDK's own client. No effect is enabled in its environment (no
// provider configured, no sandbox), so the mutating tools answer
// unknown_effect; the reads work on intents that the command line enqueued
// and that an in-process serve carried out.
func TestMCPStdio(t *testing.T) {
	t.Parallel()

	bin := filepath.Join(t.TempDir(), "outboxd")
	build := exec.Command("go", "build", "-o", bin, "github.com/outbox-dev/outbox/cmd/outboxd")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	bundle := setup(t)
	res := bundle.run(t, "enqueue", "--key", "stdio-1", "--effect", "noop", "--args", `{"n": 1}`)
	require.Equal(t, 0, res.code, res.stderr)

	// connect starts outboxd mcp with the bundle's database and more
	// variables, and returns the session and the process's stderr.
	connect := func(t *testing.T, kv ...string) (*mcp.ClientSession, *syncBuffer, *exec.Cmd) {
		t.Helper()
		cmd := exec.Command(bin, "mcp")
		cmd.Env = []string{
			"DATABASE_URL=" + bundle.env["DATABASE_URL"],
			"OUTBOX_SCHEMA=" + bundle.schema,
			"OUTBOX_LOG_FORMAT=json",
		}
		for i := 0; i < len(kv); i += 2 {
			cmd.Env = append(cmd.Env, kv[i]+"="+kv[i+1])
		}
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
			Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
		require.NoError(t, err, "stderr: %s", stderr)
		return cs, stderr, cmd
	}

	// keyCount is the number of intents under key in the schema, in any
	// namespace: the subtests run side by side in one schema, so each
	// counts only its own keys.
	keyCount := func(t *testing.T, key string) int {
		t.Helper()
		var n int
		require.NoError(t, bundle.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+
			pgx.Identifier{bundle.schema, "outbox_intent"}.Sanitize()+" WHERE key = $1", key).Scan(&n))
		return n
	}

	t.Run("Tools", func(t *testing.T) {
		t.Parallel()
		// No provider is configured: only the read tools are listed, and
		// a mutating tool is not there to be called.
		cs, stderr, cmd := connect(t)
		tools, err := cs.ListTools(t.Context(), nil)
		require.NoError(t, err)
		annotations := map[string]*mcp.ToolAnnotations{}
		for _, tool := range tools.Tools {
			annotations[tool.Name] = tool.Annotations
			require.NotNil(t, tool.InputSchema, tool.Name)
		}
		require.Len(t, annotations, 2)
		require.True(t, annotations["get_intent"].ReadOnlyHint)
		require.True(t, annotations["list_intents"].ReadOnlyHint)
		_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card", Arguments: map[string]any{
			"customer": "cus_1", "amount": 1999, "currency": "eur", "idempotency_key": "stdio-charge",
		}})
		require.ErrorIs(t, err, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams}, "no such tool")
		require.Zero(t, keyCount(t, "stdio-charge"))

		// Closing stdin ends the process, cleanly.
		require.NoError(t, cs.Close())
		require.Equal(t, 0, cmd.ProcessState.ExitCode(), "stderr: %s", stderr)
		require.Contains(t, stderr.String(), `"msg":"outboxd mcp serving on stdio"`)
		require.Contains(t, stderr.String(), `"msg":"outboxd mcp stopped"`)
		require.NotContains(t, stderr.String(), "cus_1", "arguments are not logged")
	})

	// Every tool's input schema is a plain object (Anthropic's API refuses
	// top-level combinators, and then a Claude host loses every tool), and
	// every tool has an output schema. With the sandbox, every effect is
	// enabled, so every tool is listed.
	t.Run("PlainObjectSchemas", func(t *testing.T) {
		t.Parallel()
		cs, _, _ := connect(t, "OUTBOX_SANDBOX", "true")
		defer cs.Close()
		tools, err := cs.ListTools(t.Context(), nil)
		require.NoError(t, err)
		require.Len(t, tools.Tools, 6)
		for _, tool := range tools.Tools {
			b, err := json.Marshal(tool.InputSchema)
			require.NoError(t, err)
			var schema map[string]any
			require.NoError(t, json.Unmarshal(b, &schema))
			require.Equal(t, "object", schema["type"], tool.Name)
			for _, combinator := range []string{"oneOf", "anyOf", "allOf", "not", "if", "then", "else"} {
				require.NotContains(t, schema, combinator, "%s: %s at the top level", tool.Name, combinator)
			}
			require.NotNil(t, tool.OutputSchema, tool.Name)
		}
	})

	// The model-key guard over stdio: a re-emission under a fresh key is
	// refused, and nothing more is recorded. (charge is enabled by its
	// provider's variables; nothing here calls the provider.)
	t.Run("ModelKeyGuard", func(t *testing.T) {
		t.Parallel()
		cs, stderr, _ := connect(t, "OUTBOX_STRIPE_KEY", "sk_test_stdio", "OUTBOX_STRIPE_URL", "http://127.0.0.1:9")
		defer cs.Close()
		args := map[string]any{"customer": "cus_stdio", "amount": 4242, "currency": "eur", "idempotency_key": "stdio-model-1"}
		call, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card", Arguments: args})
		require.NoError(t, err)
		require.False(t, call.IsError, "%s; stderr: %s", structuredJSON(t, call), stderr)
		args["idempotency_key"] = "stdio-model-2"
		call, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card", Arguments: args})
		require.NoError(t, err)
		require.True(t, call.IsError)
		require.Contains(t, structuredJSON(t, call), `"code":"possible_duplicate"`)
		require.Contains(t, structuredJSON(t, call), `"key":"stdio-model-1"`)
		require.Zero(t, keyCount(t, "stdio-model-2"))
	})

	t.Run("GetIntentWaits", func(t *testing.T) {
		t.Parallel()
		cs, stderr, _ := connect(t)
		defer cs.Close()

		call, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get_intent", Arguments: map[string]any{"key": "stdio-1"}})
		require.NoError(t, err)
		require.False(t, call.IsError, "%s", structuredJSON(t, call))

		// serve carries the intent out while get_intent waits for it.
		srv := testrun.Serve(t, bundle.env)
		defer srv.Stop()
		call, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get_intent", Arguments: map[string]any{"key": "stdio-1", "wait_seconds": 30}})
		require.NoError(t, err)
		require.False(t, call.IsError, "%s; stderr: %s", structuredJSON(t, call), stderr)
		var intent outbox.Intent
		require.NoError(t, json.Unmarshal([]byte(structuredJSON(t, call)), &intent))
		require.Equal(t, outbox.StateSucceeded, intent.State)

		call, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "list_intents", Arguments: map[string]any{"states": []string{"succeeded"}}})
		require.NoError(t, err)
		require.Contains(t, structuredJSON(t, call), `"key":"stdio-1"`)
	})

	// With the sandbox, charge is enabled (against a stand-in Stripe that
	// outboxd mcp never calls: it only records intents).
	t.Run("SandboxCharge", func(t *testing.T) {
		t.Parallel()
		cs, stderr, _ := connect(t, "OUTBOX_SANDBOX", "true", "OUTBOX_NAMESPACE", "sandbox-charge")
		defer cs.Close()
		chargeCall := func(args map[string]any) (*mcp.CallToolResult, map[string]any) {
			t.Helper()
			call, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card", Arguments: args})
			require.NoError(t, err)
			var answer map[string]any
			require.NoError(t, json.Unmarshal([]byte(structuredJSON(t, call)), &answer))
			return call, answer
		}
		args := map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur", "idempotency_key": "stdio-order-1"}
		call, first := chargeCall(args)
		require.False(t, call.IsError, "%v; stderr: %s", first, stderr)
		require.Equal(t, false, first["duplicate"])
		require.Equal(t, "charge", first["effect"])
		call, second := chargeCall(args)
		require.False(t, call.IsError)
		require.Equal(t, true, second["duplicate"])
		require.Equal(t, first["id"], second["id"])

		delete(args, "idempotency_key")
		_, auto1 := chargeCall(args)
		_, auto2 := chargeCall(args)
		require.Equal(t, "auto", auto1["key_source"])
		require.Equal(t, false, auto1["duplicate"])
		require.Equal(t, true, auto2["duplicate"])
		require.Equal(t, auto1["id"], auto2["id"])

		args["idempotency_key"] = "stdio-order-1"
		args["amount"] = 2500
		call, reused := chargeCall(args)
		require.True(t, call.IsError)
		require.Equal(t, "idempotency_key_reused", reused["error"].(map[string]any)["code"])
	})

	t.Run("Namespace", func(t *testing.T) {
		t.Parallel()
		cs, _, _ := connect(t, "OUTBOX_NAMESPACE", "elsewhere")
		defer cs.Close()
		call, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get_intent", Arguments: map[string]any{"key": "stdio-1"}})
		require.NoError(t, err)
		require.True(t, call.IsError)
		require.Contains(t, structuredJSON(t, call), `"code":"not_found"`)
	})
}

// structuredJSON is a result's JSON: its structuredContent, or for a tool
// error (which has none) the error's JSON, its last text block.
func structuredJSON(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res.IsError {
		return res.Content[len(res.Content)-1].(*mcp.TextContent).Text
	}
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	return string(b)
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's
// reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMCPCommand(t *testing.T) {
	t.Parallel()

	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		res := runEnv(t, nil, nil, "mcp", "--help")
		require.Equal(t, 0, res.code)
		require.Contains(t, res.stdout, "outboxd mcp")
		require.Contains(t, res.stdout, "OUTBOX_AUTO_KEY_WINDOW")
		require.Contains(t, runEnv(t, nil, nil, "--help").stdout, "  mcp ")
	})

	t.Run("NoDatabase", func(t *testing.T) {
		t.Parallel()
		res := runEnv(t, nil, strings.NewReader(""), "mcp")
		require.Equal(t, 1, res.code)
		require.Contains(t, lastLine(res.stderr), "DATABASE_URL: not set")
		require.Empty(t, res.stdout, "stdout carries only MCP")
	})

	t.Run("StdinClosed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// An empty stdin is a client that went away at once.
		res := runEnv(t, bundle.env, strings.NewReader(""), "mcp")
		require.Equal(t, 0, res.code, res.stderr)
		require.Empty(t, res.stdout)
	})

	t.Run("Unmigrated", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		res := runEnv(t, with(bundle.env, "OUTBOX_SCHEMA", "t_not_there"), strings.NewReader(""), "mcp")
		require.Equal(t, 1, res.code)
		require.Contains(t, lastLine(res.stderr), "has pending migrations")
	})
}

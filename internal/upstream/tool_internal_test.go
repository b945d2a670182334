package upstream

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects/declared"
)

// secretTool is a recorded tool of a stdio upstream whose env holds
// secret.
func secretTool(t *testing.T, secret string) *Tool {
	t.Helper()
	f, err := ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    command: [sh]\n    env: {A: \"{env.TOKEN}\"}\n"), &declared.Config{
		LookupEnvFunc: func(n string) (string, bool) { return secret, n == "TOKEN" },
	})
	require.NoError(t, err)
	return &Tool{conn: NewConn(f.Upstreams[0], nil), locked: &LockedTool{Name: "write"}, name: "up_write"}
}

// A secret in structuredContent is scrubbed whatever characters it holds:
// JSON escapes them (a quote, a backslash, <, > and &), so scrubbing the
// encoded text missed them.
func TestStoreScrubsEscapedSecrets(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{`tok"en\value-1234`, "tok<en>&value-1234", "tok\tvalue\u2028-1234"} {
		tool := secretTool(t, secret)
		raw, err := tool.store(&mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: "made with " + secret}},
			StructuredContent: map[string]any{"token": secret, "nested": []any{map[string]any{"t": "a " + secret + " b"}}, secret: 1},
		})
		require.NoError(t, err)
		var back struct {
			Content           []map[string]any `json:"content"`
			StructuredContent any              `json:"structuredContent"`
		}
		require.NoError(t, json.Unmarshal(raw, &back))
		plain, _ := json.Marshal(back)
		require.NotContains(t, string(plain), "value")
		require.Contains(t, string(plain), "[redacted]")
	}
}

package console_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/console"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/outbox"
)

// An intent recorded over MCP shows its MCP client and its task id, the
// one the MCP server answers for it; another intent shows neither.
func TestIntentMCPTask(t *testing.T) {
	t.Parallel()
	var ids *mcpserver.TaskIDs
	b := setup(t, &console.Config{Tokens: tokens, TaskIDFunc: func(ctx context.Context, namespace string, id int64) (string, error) {
		return ids.TaskID(ctx, namespace, id)
	}})
	ids = mcpserver.NewTaskIDs(b.pool, b.schema, nil)
	res, err := b.client.Enqueue(context.Background(), &outbox.EnqueueParams{
		Namespace: "alpha", Key: "from-mcp", Effect: "noop", Args: map[string]any{"n": 1}, RequestedBy: "mcp:claude-desktop",
	})
	require.NoError(t, err)
	want, err := ids.TaskID(context.Background(), "alpha", res.Intent.ID)
	require.NoError(t, err)
	b.enqueue(t, "alpha", "from-go", "noop", map[string]any{"n": 2}, false)

	operator := b.login(t, tokenOperator)
	page := b.request(t, http.MethodGet, "/console/intents/alpha/from-mcp", nil, operator)
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "<dt>MCP client</dt><dd>claude-desktop</dd>")
	require.Contains(t, page.body, "<dt>MCP task</dt><dd><code>"+want+"</code></dd>")

	page = b.request(t, http.MethodGet, "/console/intents/alpha/from-go", nil, operator)
	require.NotContains(t, page.body, "MCP task")
}

package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/console"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/testfactory"
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

// An intent whose upstream holds the call as a task shows the task, and
// the cancel form passes the cancel to the upstream: the page then says
// who asked, and offers no second cancel.
func TestIntentUpstreamTaskCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	testfactory.Intent(ctx, t, b.pool, &testfactory.IntentOpts{
		Namespace: "alpha", Key: "slow-order", Schema: b.schema, State: outbox.StateRunning, Attempt: testfactory.Ptr(1),
		LeaseExpiresAt: testfactory.Ptr(time.Now().Add(time.Minute)), MaybeSent: testfactory.Ptr(true),
	})
	_, err := b.pool.Exec(ctx, `UPDATE `+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+
		` SET checkpoint = '{"upstream": "orders", "upstream_task": "order-task-9"}' WHERE key = 'slow-order'`)
	require.NoError(t, err)
	operator := b.login(t, tokenOperator)

	page := b.request(t, http.MethodGet, "/console/intents/alpha/slow-order", nil, operator)
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "<dt>Upstream task</dt><dd><code>order-task-9</code></dd>")
	require.Contains(t, page.body, "the cancel is passed to it")

	a := b.request(t, http.MethodPost, "/console/intents/alpha/slow-order/cancel", url.Values{"note": {"wrong item"}}, operator)
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	require.Contains(t, a.location, "done=cancel_requested")
	require.Equal(t, outbox.StateRunning, b.get(t, "alpha", "slow-order").State, "the upstream decides")

	page = b.request(t, http.MethodGet, "/console/intents/alpha/slow-order?done=cancel_requested", nil, operator)
	require.Contains(t, page.body, "Cancel passed to the provider")
	require.Contains(t, page.body, "cancel asked by "+access.ConsoleActor(tokens[0].Fingerprint()))
	require.NotContains(t, page.body, "Cancel this intent", "asked once")
}

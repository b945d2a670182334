package mcpserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testrun"
)

// fakeUpstreamTool is a recorded MCP upstream tool as internal/upstream's
// Tool presents itself to the MCP server: an effect that names its
// upstream, with a withdrawal the test sets.
type fakeUpstreamTool struct {
	withdrawn atomic.Pointer[string]
	wait      time.Duration
}

func (f *fakeUpstreamTool) Name() string                       { return "notes_create_note" }
func (f *fakeUpstreamTool) Guarantee() effects.Guarantee       { return effects.GuaranteeAtMostOnce }
func (f *fakeUpstreamTool) ValidateArgs(json.RawMessage) error { return nil }
func (f *fakeUpstreamTool) Tool() string                       { return f.Name() }
func (f *fakeUpstreamTool) Description() string                { return "Creates a note." }
func (f *fakeUpstreamTool) ArgsSchema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"body":{"type":"string"}}}`)
}
func (f *fakeUpstreamTool) UpstreamName() string { return "notes" }
func (f *fakeUpstreamTool) UpstreamTool() string { return "create_note" }
func (f *fakeUpstreamTool) Wait() time.Duration  { return f.wait }
func (f *fakeUpstreamTool) Namespaces() []string { return nil }
func (f *fakeUpstreamTool) AlwaysClaim() bool    { return true }
func (f *fakeUpstreamTool) Withdrawn() string {
	if p := f.withdrawn.Load(); p != nil {
		return *p
	}
	return ""
}

func (f *fakeUpstreamTool) Execute(context.Context, *effects.Request) (json.RawMessage, error) {
	return json.RawMessage(`{"content":[{"type":"text","text":"note saved"}]}`), nil
}

// upstreamBundle is a bundle whose registry also holds a fake recorded
// upstream tool, and a server mirroring it.
func upstreamBundle(t *testing.T) (*testBundle, *fakeUpstreamTool, *mcpserver.Config) {
	t.Helper()
	b := setup(t)
	fake := &fakeUpstreamTool{}
	require.NoError(t, b.registry.Register(fake))
	tools, err := mcpserver.ToolsFor(b.registry)
	require.NoError(t, err)
	return b, fake, &mcpserver.Config{Tools: tools}
}

// A withdrawn recorded tool is not listed, and a call that comes anyway
// is refused with the withdrawal's code before anything is recorded.
func TestUpstreamWithdrawnRefusesCalls(t *testing.T) {
	t.Parallel()
	b, fake, config := upstreamBundle(t)
	cs := b.connect(t, config)

	drift := "upstream_drift"
	fake.withdrawn.Store(&drift)
	te := callError(t, cs, "notes_create_note", map[string]any{"body": "a", "idempotency_key": "k1"}, "upstream_drift")
	require.Contains(t, te.Error.Message, "outboxd effects pin")
	require.Zero(t, testdb.CountIntents(t, b.pool, b.schema), "nothing recorded for a withdrawn tool")

	fake.withdrawn.Store(nil)
	call[answer](t, cs, "notes_create_note", map[string]any{"body": "a", "idempotency_key": "k1"})
	require.Equal(t, 1, testdb.CountIntents(t, b.pool, b.schema))
}

// A recorded upstream tool's description says how long its call waits
// for the outcome.
func TestUpstreamToolDescriptionWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := &fakeUpstreamTool{wait: 10 * time.Second}
	require.NoError(t, b.registry.Register(fake))
	tools, err := mcpserver.ToolsFor(b.registry)
	require.NoError(t, err)
	var found bool
	for _, tool := range tools {
		if tool.Name == "notes_create_note" {
			found = true
			require.Contains(t, tool.Description, "waits up to 10s for the outcome")
		}
	}
	require.True(t, found)
}

// annotatedUpstreamTool is a recorded upstream tool whose upstream gave it
// a title and hints.
type annotatedUpstreamTool struct{ fakeUpstreamTool }

func (a *annotatedUpstreamTool) Title() string { return "Execute SQL" }
func (a *annotatedUpstreamTool) UpstreamAnnotations() *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: false, OpenWorldHint: ptr(false), Title: "Execute SQL"}
}

func ptr[T any](v T) *T { return &v }

// A mirrored recorded tool keeps the upstream's title and what its hints
// say the tool does, and states outbox's guarantee: a repeated call with
// the same key has no further effect (idempotent), whatever the upstream
// said.
func TestUpstreamToolAnnotations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.registry.Register(&annotatedUpstreamTool{}))
	tools, err := mcpserver.ToolsFor(b.registry)
	require.NoError(t, err)
	cs := b.connect(t, &mcpserver.Config{Tools: tools})
	list, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	var got *mcp.Tool
	for _, tool := range list.Tools {
		if tool.Name == "notes_create_note" {
			got = tool
		}
	}
	require.NotNil(t, got)
	require.Equal(t, "Execute SQL", got.Title)
	require.NotNil(t, got.Annotations)
	require.Equal(t, "Execute SQL", got.Annotations.Title)
	require.True(t, got.Annotations.IdempotentHint, "outbox's guarantee")
	require.Equal(t, ptr(true), got.Annotations.DestructiveHint)
	require.Equal(t, ptr(false), got.Annotations.OpenWorldHint, "the upstream's to say")
}

// A success answer carries the upstream's result once in the text a model
// reads (its own blocks), and once in structuredContent (upstream), not
// again as the intent's result.
func TestUpstreamResultOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := &fakeUpstreamTool{wait: 20 * time.Second}
	require.NoError(t, b.registry.Register(fake))
	tools, err := mcpserver.ToolsFor(b.registry)
	require.NoError(t, err)
	testrun.Dispatcher(t, b.pool, &dispatcher.Config{Effects: b.registry, Schema: b.schema})
	cs := b.connect(t, &mcpserver.Config{Tools: tools})
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "notes_create_note", Arguments: map[string]any{"body": "a", "idempotency_key": "once"}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(res))
	require.Equal(t, 1, strings.Count(text(res), "note saved"), "once in the text: %s", text(res))
	var answer struct {
		State    string          `json:"state"`
		Result   json.RawMessage `json:"result"`
		Upstream struct {
			Content []map[string]any `json:"content"`
		} `json:"upstream"`
	}
	require.NoError(t, json.Unmarshal(structured(t, res), &answer))
	require.Equal(t, "succeeded", answer.State)
	require.Equal(t, "null", string(answer.Result), "not again as the intent's result")
	require.Equal(t, "note saved", answer.Upstream.Content[0]["text"])
}

// requested_by names the MCP client from the request's own _meta
// (protocol 2026-07-28, as a stateless /mcp gets it), else from the
// handshake.
func TestRequestedByPerRequestClientInfo(t *testing.T) {
	t.Parallel()
	b, _, config := upstreamBundle(t)
	cs := b.connect(t, config)
	got := call[answer](t, cs, "notes_create_note", map[string]any{"body": "a", "idempotency_key": "handshake"})
	require.Equal(t, "mcp:test", *got.RequestedBy, "from the handshake")

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "notes_create_note", Arguments: map[string]any{"body": "b", "idempotency_key": "per-request"},
		Meta: mcp.Meta{mcp.MetaKeyClientInfo: map[string]any{"name": "claude-code", "version": "2"}}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(res))
	intent, err := b.client.Get(t.Context(), "", "per-request")
	require.NoError(t, err)
	require.Equal(t, "mcp:claude-code", *intent.RequestedBy, "the request's own client info wins")
}

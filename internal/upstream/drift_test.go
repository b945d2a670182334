package upstream_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
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
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnvFunc: func(n string) (string, bool) {
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
	var mu sync.Mutex
	var named []string // the tool label of every call and drift counted
	c, err := upstream.Bind(f, lock, &upstream.BindConfig{
		ObserveDriftFunc: func(_, tool string) {
			drifts.Add(1)
			mu.Lock()
			named = append(named, tool)
			mu.Unlock()
		},
		ObserveCallFunc: func(_, tool, _ string) {
			mu.Lock()
			named = append(named, tool)
			mu.Unlock()
		},
	})
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
	// outbox_upstream_calls_total and outbox_upstream_drift_total name a
	// tool alike: by its name at the upstream, beside the upstream's.
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, named)
	for _, tool := range named {
		require.Equal(t, "write", tool)
	}
}

// A tool missing from its upstream waits, without spending attempts, for
// missing_grace, a clock of its own from when it was first seen gone;
// then a never-sent intent fails (upstream_tool_missing) and a possibly
// sent one keeps waiting not_sent, to end unknown, never failed.
func TestUpstreamMissingGrace(t *testing.T) {
	t.Parallel()
	file := "upstreams:\n  up:\n    url: \"http://127.0.0.1:9/mcp\"\n    missing_grace: 300ms\n    refresh: 1m\n"
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{})
	require.NoError(t, err)
	entry, problems := f.Upstreams[0].Pin("srv", []*mcp.Tool{{Name: "write", InputSchema: json.RawMessage(`{"type":"object"}`)}}, nil)
	require.Empty(t, problems)
	c, err := upstream.Bind(f, &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{"up": entry}}, nil)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	tool := c.Recorded[0]
	never := &effects.Request{Args: json.RawMessage(`{}`), ProviderKey: "pk"}
	maybe := &effects.Request{Args: json.RawMessage(`{}`), ProviderKey: "pk", MaybeSent: true}
	classOf := func(req *effects.Request) (effects.Class, string, time.Duration) {
		_, err := tool.Execute(context.Background(), req)
		class, code := effects.Classify(err)
		return class, code, effects.RetryAfterOf(err)
	}

	tool.Withdraw(upstream.CodeUpstreamDrift)
	class, code, wait := classOf(never)
	require.Equal(t, effects.ClassNotSent, class)
	require.Equal(t, upstream.CodeUpstreamDrift, code)
	require.Equal(t, 5*time.Second, wait, "a drifted tool's intents look again within 5 s (a listing may restore it at any moment), spending no attempt")

	tool.Withdraw(upstream.CodeUpstreamToolMissing)
	for _, req := range []*effects.Request{never, maybe} {
		class, code, wait = classOf(req)
		require.Equal(t, effects.ClassNotSent, class)
		require.Equal(t, upstream.CodeUpstreamToolMissing, code)
		require.Positive(t, wait, "within missing_grace, the intent waits without spending an attempt")
		require.LessOrEqual(t, wait, 300*time.Millisecond)
	}
	time.Sleep(350 * time.Millisecond)
	tool.Withdraw(upstream.CodeUpstreamToolMissing) // seen gone again: the clock runs on
	class, code, _ = classOf(never)
	require.Equal(t, effects.ClassPermanent, class, "past missing_grace, a never-sent intent fails")
	require.Equal(t, upstream.CodeUpstreamToolMissing, code)
	class, _, wait = classOf(maybe)
	require.Equal(t, effects.ClassNotSent, class, "a possibly sent intent never fails for a missing tool")
	require.Zero(t, wait, "it spends its attempts, and ends unknown")

	// Back, then gone again: a new clock.
	tool.Withdraw("")
	tool.Withdraw(upstream.CodeUpstreamToolMissing)
	class, _, wait = classOf(never)
	require.Equal(t, effects.ClassNotSent, class)
	require.Positive(t, wait)
}

// A new session (a child restarted, an HTTP session opened anew) is
// compared with the pin before it takes a call: a tool changed under the
// same name is never called through it, even before any periodic listing.
func TestUpstreamSessionComparedBeforeCalls(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := mcp.NewServer(&mcp.Implementation{Name: "drifting", Version: "1"}, nil)
	handler := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	srv.AddTool(&mcp.Tool{Name: "write", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}, handler)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	f, err := upstream.ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    url: \"{env.URL}\"\n    connect_timeout: 2s\n"),
		&declared.Config{LookupEnvFunc: func(n string) (string, bool) { return hs.URL, n == "URL" }})
	require.NoError(t, err)
	conn := upstream.NewConn(f.Upstreams[0], nil)
	server, listed, err := conn.ListTools(context.Background())
	conn.Close()
	require.NoError(t, err)
	entry, problems := f.Upstreams[0].Pin(server, listed, nil)
	require.Empty(t, problems)

	// Changed after the pin, before outbox connects: no Start, no refresh.
	srv.RemoveTools("write")
	srv.AddTool(&mcp.Tool{Name: "write", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"to":{"type":"string"}}}`)}, handler)
	c, err := upstream.Bind(f, &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{"up": entry}}, nil)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Recorded[0].Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{"text":"a"}`), ProviderKey: "pk"})
	class, code := effects.Classify(err)
	require.Equal(t, effects.ClassNotSent, class, "%v", err)
	require.Equal(t, upstream.CodeUpstreamDrift, code)
	require.Zero(t, calls.Load(), "the drifted tool was never called")
}

// A look-up tool that is not mirrored is pinned as a look-up, and its
// drift withdraws it: a look-up through a changed tool fails
// (lookup_failed), never reads "not found".
func TestUpstreamLookupToolPinned(t *testing.T) {
	t.Parallel()
	var finds atomic.Int32
	srv := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "create", InputSchema: json.RawMessage(`{"type":"object","properties":{"body":{"type":"string"}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	find := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		finds.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"notes":[]}`}}}, nil
	}
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	srv.AddTool(&mcp.Tool{Name: "find", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: readOnly}, find)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	file := `upstreams:
  up:
    url: "{env.URL}"
    refresh: 1s
    connect_timeout: 2s
    include: [create]
    tools:
      create:
        guarantee: reconcilable
        marker: {arg: body, append: " {provider_key}"}
        lookup: {tool: find, items: result.data.notes, match: item.body.contains(provider_key)}
`
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnvFunc: func(n string) (string, bool) {
		return hs.URL, n == "URL"
	}})
	require.NoError(t, err)
	conn := upstream.NewConn(f.Upstreams[0], nil)
	server, listed, err := conn.ListTools(context.Background())
	conn.Close()
	require.NoError(t, err)
	entry, problems := f.Upstreams[0].Pin(server, listed, nil)
	require.Empty(t, problems)
	classes := map[string]string{}
	for _, lt := range entry.Tools {
		classes[lt.Name] = lt.Class
	}
	require.Equal(t, map[string]string{"create": upstream.ClassRecorded, "find": upstream.ClassLookup}, classes, "the look-up tool is pinned, not mirrored")

	c, err := upstream.Bind(f, &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{"up": entry}}, nil)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.Empty(t, c.Passthrough, "a look-up tool is not mirrored")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.Start(ctx)
	tool := c.Recorded[0]
	req := &effects.Request{Args: json.RawMessage(`{"body":"a"}`), ProviderKey: "pk"}
	_, found, err := tool.LookupRequest(context.Background(), req, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.False(t, found)
	require.EqualValues(t, 1, finds.Load())

	// The look-up tool changes under the same name.
	srv.RemoveTools("find")
	srv.AddTool(&mcp.Tool{Name: "find", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`), Annotations: readOnly}, find)
	require.Eventually(t, func() bool {
		_, _, err := tool.LookupRequest(context.Background(), req, time.Now().Add(-time.Hour))
		return err != nil
	}, 10*time.Second, 100*time.Millisecond)
	before := finds.Load()
	_, found, err = tool.LookupRequest(context.Background(), req, time.Now().Add(-time.Hour))
	require.False(t, found)
	require.ErrorContains(t, err, "lookup_failed")
	require.ErrorContains(t, err, "withdrawn") // drift, or missing while it was replaced
	require.Equal(t, before, finds.Load(), "a withdrawn look-up tool is not called")
}

// wait defaults to 10 s: a quick upstream's call is answered in the same
// call, not with pending.
func TestUpstreamWaitDefault(t *testing.T) {
	t.Parallel()
	f, err := upstream.ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    url: \"http://127.0.0.1:9/mcp\"\n"), &declared.Config{})
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, f.Upstreams[0].Wait())
	f, err = upstream.ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    url: \"http://127.0.0.1:9/mcp\"\n    wait: 0s\n"), &declared.Config{})
	require.NoError(t, err)
	require.Zero(t, f.Upstreams[0].Wait(), "0 answers at once")
}

// The lock keeps the upstream's title of a tool (its own, else its
// annotations'), which the mirrored tool shows.
func TestUpstreamPinKeepsTitle(t *testing.T) {
	t.Parallel()
	f, err := upstream.ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    url: \"http://127.0.0.1:9/mcp\"\n"), &declared.Config{})
	require.NoError(t, err)
	entry, problems := f.Upstreams[0].Pin("srv", []*mcp.Tool{
		{Name: "execute_sql", Title: "Execute SQL\u200b", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: "drop", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{Title: "Drop a table", DestructiveHint: new(true)}},
	}, nil)
	require.Empty(t, problems)
	c, err := upstream.Bind(f, &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{"up": entry}}, nil)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.Equal(t, "Execute SQL", c.Recorded[0].Title(), "cleaned")
	require.Equal(t, "Drop a table", c.Recorded[1].Title())
	require.True(t, *c.Recorded[1].UpstreamAnnotations().DestructiveHint)
}

// Only what the lock records needs a new pin: a runtime setting (wait,
// timeout, processes...) binds to the old lock, and a lock for another
// declaration says what changed.
func TestUpstreamRepinOnlyForWhatTheLockRecords(t *testing.T) {
	t.Parallel()
	parse := func(extra string) *upstream.File {
		f, err := upstream.ParseFile("effects.yaml", []byte("upstreams:\n  up:\n    url: \"http://127.0.0.1:9/mcp\"\n"+extra), &declared.Config{})
		require.NoError(t, err)
		return f
	}
	f := parse("    include: [write]\n")
	entry, problems := f.Upstreams[0].Pin("srv", []*mcp.Tool{{Name: "write", InputSchema: json.RawMessage(`{"type":"object"}`)}}, nil)
	require.Empty(t, problems)
	lock := &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{"up": entry}}

	c, err := upstream.Bind(parse("    include: [write]\n    wait: 30s\n    timeout: 5s\n    processes: 2\n    max_in_flight: 2\n    description: Notes.\n"), lock, nil)
	require.NoError(t, err, "runtime settings need no new pin")
	c.Close()

	_, err = upstream.Bind(parse("    include: [write, read]\n    wait: 30s\n"), lock, &upstream.BindConfig{EffectsPath: "effects.yaml", LockPath: "effects.yaml.lock"})
	require.ErrorIs(t, err, upstream.ErrLockMissing)
	require.ErrorContains(t, err, "upstream up in effects.yaml changed since it was pinned: include")
	require.ErrorContains(t, err, "outboxd effects pin effects.yaml")
	require.NotContains(t, err.Error(), "older than the file")
}

// Pinning an upstream whose child fails to start shows the child's last
// stderr lines, which say why, beside the handshake's error.
func TestUpstreamPinShowsChildStderr(t *testing.T) {
	t.Parallel()
	file := "upstreams:\n  up:\n    command: [sh, -c, \"echo 'Error: cannot reach the database at db:5432' >&2; exit 3\"]\n    connect_timeout: 5s\n"
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{})
	require.NoError(t, err)
	_, _, err = upstream.PinFile(context.Background(), f, nil, "test")
	require.Error(t, err)
	require.ErrorContains(t, err, "upstream up (stdio: sh -c")
	require.ErrorContains(t, err, "its last stderr lines:\n    Error: cannot reach the database at db:5432")
}

package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
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

// bindListed parses file, pins it against listed (no upstream needed) and
// binds it.
func bindListed(t *testing.T, file string, lookupEnv func(string) (string, bool), listed []*mcp.Tool) *upstream.Catalog {
	t.Helper()
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnvFunc: lookupEnv})
	require.NoError(t, err)
	lock := &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{}}
	for _, u := range f.Upstreams {
		entry, problems := u.Pin(u.Name()+" 1.0", listed, nil)
		require.Empty(t, problems)
		lock.Upstreams[u.Name()] = entry
	}
	c, err := upstream.Bind(f, lock, &upstream.BindConfig{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func recordedTool(t *testing.T, c *upstream.Catalog, name string) *upstream.Tool {
	t.Helper()
	for _, r := range c.Recorded {
		if r.Name() == name {
			return r
		}
	}
	require.FailNow(t, "no recorded tool "+name)
	return nil
}

// A key_arg tool's dedupe window leaves room for the call's own timeout,
// as a declared HTTP effect's does: a call sent at the window's last
// moment may reach the upstream a timeout later.
func TestUpstreamDedupeWindowLessTimeout(t *testing.T) {
	t.Parallel()
	file := pinFile + "    timeout: 20s\n"
	c := bindListed(t, file, upstreamEnv, []*mcp.Tool{
		listedTool("create_issue", `{"type":"object","required":["repo","title"],"properties":{"repo":{"type":"string"},"title":{"type":"string"},"body":{"type":"string"}}}`, false),
		listedTool("list_issues", `{"type":"object","properties":{"repo":{"type":"string"}}}`, true),
		listedTool("send", `{"type":"object","properties":{"to":{"type":"string"},"idempotencyKey":{"type":"string"}}}`, false),
	})
	require.Equal(t, 24*time.Hour-20*time.Second, recordedTool(t, c, "gh_send").DedupeWindow())
}

// serveHTTP serves srv over streamable HTTP on loopback and returns its
// URL.
func serveHTTP(t *testing.T, srv *mcp.Server) string {
	t.Helper()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// bindServed parses file (whose url is {env.URL}), pins it against the
// upstream at url, and binds it.
func bindServed(t *testing.T, file, url string) *upstream.Catalog {
	t.Helper()
	return bindServedEnv(t, file, func(n string) (string, bool) { return url, n == "URL" })
}

// bindServedEnv parses file with lookupEnv's variables, pins it against
// the upstream its url names, and binds it.
func bindServedEnv(t *testing.T, file string, lookupEnv func(string) (string, bool)) *upstream.Catalog {
	t.Helper()
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnvFunc: lookupEnv})
	require.NoError(t, err)
	u := f.Upstreams[0]
	conn := upstream.NewConn(u, nil)
	server, listed, err := conn.ListTools(context.Background())
	conn.Close()
	require.NoError(t, err)
	entry, problems := u.Pin(server, listed, nil)
	require.Empty(t, problems)
	lock := &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{u.Name(): entry}}
	c, err := upstream.Bind(f, lock, &upstream.BindConfig{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// notesServer is an upstream whose create_note saves a note and whose
// get_notes answers the notes as markdown text, not JSON.
type notesServer struct {
	mu    sync.Mutex
	notes []string
}

func (n *notesServer) server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "create_note", InputSchema: json.RawMessage(`{"type":"object","properties":{"body":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Body string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			n.mu.Lock()
			n.notes = append(n.notes, args.Body)
			n.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "saved"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "get_notes", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			var b strings.Builder
			b.WriteString("# Notes\n")
			for _, note := range n.notes {
				b.WriteString("- " + note + "\n")
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, nil
		})
	return srv
}

// A found/missing look-up whose rule matched is found whatever the form
// of the answer: a markdown answer has no JSON data, and was read as "not
// found", so the note was written again.
func TestUpstreamLookupFoundInText(t *testing.T) {
	t.Parallel()
	notes := &notesServer{}
	file := `upstreams:
  notes:
    url: "{env.URL}"
    connect_timeout: 5s
    tools:
      create_note:
        guarantee: reconcilable
        marker: {arg: body, append: " <!-- {provider_key} -->"}
        lookup:
          tool: get_notes
          found: result.content[0].text.contains(provider_key)
          missing: "!result.content[0].text.contains(provider_key)"
`
	c := bindServed(t, file, serveHTTP(t, notes.server()))
	tool := recordedTool(t, c, "notes_create_note")
	req := &effects.Request{Args: json.RawMessage(`{"body":"hello"}`), ProviderKey: "pk-text-1"}

	_, found, err := tool.LookupRequest(context.Background(), req, time.Now())
	require.NoError(t, err)
	require.False(t, found, "nothing written yet")

	_, err = tool.Execute(context.Background(), req)
	require.NoError(t, err)
	result, found, err := tool.LookupRequest(context.Background(), req, time.Now())
	require.NoError(t, err)
	require.True(t, found, "the rule matched a markdown answer")
	require.Contains(t, string(result), "pk-text-1", "the result is the look-up's answer")
	require.Contains(t, string(result), `"reconciled":true`)
}

// A URL whose secret sits in its path never appears in an error: errors
// show the declared template. The upstream here refuses connections, so
// the call fails naming the URL.
func TestUpstreamURLSecretInPath(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.NotFoundHandler())
	dead := hs.URL
	hs.Close()
	const secret = "s3cr3t-path-token-5678"
	file := "upstreams:\n  up:\n    url: \"{env.URL}\"\n    connect_timeout: 2s\n    tools:\n      write: {guarantee: at_most_once}\n"
	f, err := upstream.ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnvFunc: func(n string) (string, bool) {
		return dead + "/" + secret + "/mcp", n == "URL"
	}})
	require.NoError(t, err)
	u := f.Upstreams[0]
	entry, problems := u.Pin("up 1", []*mcp.Tool{listedTool("write", `{"type":"object"}`, false)}, nil)
	require.Empty(t, problems)
	var logs syncBuffer
	c, err := upstream.Bind(f, &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{"up": entry}},
		&upstream.BindConfig{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.Start(ctx)

	_, err = recordedTool(t, c, "up_write").Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{}`), ProviderKey: "pk"})
	require.Error(t, err)
	require.NotContains(t, err.Error(), secret)
	require.Contains(t, err.Error(), "{env.URL}")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "listing failed") }, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, logs.String(), secret)
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
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

// An HTTP upstream that closes its standalone SSE stream (the GET a
// session keeps open for notifications) does not fail the calls in
// flight: each call's own response stream decides it.
func TestUpstreamStandaloneStreamClosed(t *testing.T) {
	t.Parallel()
	inCall := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "closing", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "write", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case inCall <- struct{}{}:
			default:
			}
			<-release
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "written"}}}, nil
		})
	var closeGET atomic.Bool
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && closeGET.Load() {
			// The stream opens, then the upstream ends it once a call runs.
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-inCall:
			case <-r.Context().Done():
			}
			close(release)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	c := bindServed(t, "upstreams:\n  up:\n    url: \"{env.URL}\"\n    connect_timeout: 5s\n    timeout: 10s\n    tools:\n      write: {guarantee: at_most_once}\n", hs.URL)
	closeGET.Store(true)
	res, err := recordedTool(t, c, "up_write").Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{}`), ProviderKey: "pk"})
	require.NoError(t, err)
	require.Contains(t, string(res), "written")
}

// settle counts from the end of the last attempt that may have sent, not
// from the intent's creation: a call sent late (after an approval, a
// backlog, not_sent retries) still gets its settle time.
func TestUpstreamSettleFromLastAttempt(t *testing.T) {
	t.Parallel()
	notes := &notesServer{}
	file := `upstreams:
  notes:
    url: "{env.URL}"
    connect_timeout: 5s
    timeout: 2s
    tools:
      create_note:
        guarantee: reconcilable
        marker: {arg: body, append: " <!-- {provider_key} -->"}
        lookup:
          tool: get_notes
          found: result.content[0].text.contains(provider_key)
          missing: "!result.content[0].text.contains(provider_key)"
        settle: 30s
`
	c := bindServed(t, file, serveHTTP(t, notes.server()))
	tool := recordedTool(t, c, "notes_create_note")
	createdAt := time.Now().Add(-time.Hour)

	// Sent just now, an hour after the intent was created: not settled.
	req := &effects.Request{Args: json.RawMessage(`{"body":"late"}`), ProviderKey: "pk-late", LastAttemptEnd: time.Now().Add(-time.Second)}
	_, found, err := tool.LookupRequest(context.Background(), req, createdAt)
	require.False(t, found)
	require.ErrorContains(t, err, "settling for 30s")

	// Settled since the last attempt ended: not found is not found.
	req.LastAttemptEnd = time.Now().Add(-time.Minute)
	_, found, err = tool.LookupRequest(context.Background(), req, createdAt)
	require.NoError(t, err)
	require.False(t, found)

	// Without the attempt's end, the creation plus the timeout bounds it.
	req.LastAttemptEnd = time.Time{}
	_, _, err = tool.LookupRequest(context.Background(), req, time.Now())
	require.ErrorContains(t, err, "settling")
}

// An attempt records the arguments it sends (the marker and key_arg
// applied, the upstream's secrets scrubbed) before its call, and a call
// whose arguments could not be recorded is not sent: an operator
// resolving an unknown intent reads exactly what the upstream received.
func TestUpstreamRecordsSentArgs(t *testing.T) {
	t.Parallel()
	const secret = "tok-sent-args-secret-9876"
	var (
		mu         sync.Mutex
		recorded   json.RawMessage
		calls      []string
		mismatches []string
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, mismatches, "a call received other arguments than those recorded before it")
	})
	srv := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	for _, name := range []string{"create_note", "send"} {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object","properties":{"body":{"type":"string"},"idempotencyKey":{"type":"string"}}}`)},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				mu.Lock()
				defer mu.Unlock()
				// What was recorded before this call is what it received.
				var got, want any
				_ = json.Unmarshal([]byte(strings.ReplaceAll(string(req.Params.Arguments), secret, "[redacted]")), &got)
				_ = json.Unmarshal(recorded, &want)
				if !reflect.DeepEqual(got, want) {
					mismatches = append(mismatches, string(req.Params.Arguments)+" != "+string(recorded))
				}
				calls = append(calls, name)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
			})
	}
	srv.AddTool(&mcp.Tool{Name: "list", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "[]"}}}, nil
		})
	url := serveHTTP(t, srv)
	file := `upstreams:
  up:
    url: "{env.URL}"
    headers: {Authorization: "Bearer {env.TOKEN}"}
    connect_timeout: 5s
    tools:
      create_note:
        guarantee: reconcilable
        marker: {arg: body, append: " <!-- {provider_key} -->"}
        lookup: {tool: list, items: result.data, match: item.contains(provider_key)}
      send: {guarantee: deduplicated, key_arg: idempotencyKey, dedupe_window: 1h}
`
	c := bindServedEnv(t, file, func(n string) (string, bool) {
		switch n {
		case "URL":
			return url, true
		case "TOKEN":
			return secret, true
		}
		return "", false
	})

	record := func(_ context.Context, args json.RawMessage) error {
		mu.Lock()
		defer mu.Unlock()
		recorded = args
		return nil
	}

	t.Run("MarkerApplied", func(t *testing.T) {
		tool := recordedTool(t, c, "up_create_note")
		require.Implements(t, (*effects.SentArgsRecorder)(nil), tool)
		_, err := tool.Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{"body":"hello ` + secret + `"}`),
			ProviderKey: "pk-sent-1", RecordSentFunc: record})
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.Contains(t, string(recorded), "hello [redacted] <!-- pk-sent-1 -->", "the marker applied, the secret scrubbed")
		require.NotContains(t, string(recorded), secret)
	})

	t.Run("KeyArgSet", func(t *testing.T) {
		_, err := recordedTool(t, c, "up_send").Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{"body":"hi"}`),
			ProviderKey: "pk-sent-2", RecordSentFunc: record})
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.JSONEq(t, `{"body":"hi","idempotencyKey":"pk-sent-2"}`, string(recorded))
	})

	t.Run("NotRecordedIsNotSent", func(t *testing.T) {
		mu.Lock()
		before := len(calls)
		mu.Unlock()
		_, err := recordedTool(t, c, "up_send").Execute(context.Background(), &effects.Request{Args: json.RawMessage(`{"body":"no"}`),
			ProviderKey: "pk-sent-3", RecordSentFunc: func(context.Context, json.RawMessage) error { return errors.New("database down") }})
		class, code := effects.Classify(err)
		require.Equal(t, effects.ClassNotSent, class)
		require.Equal(t, upstream.CodeSentArgsUnrecorded, code)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, calls, before, "never called")
	})
}

// A reconcilable upstream tool's look-up may be an HTTP request, declared
// as a declared HTTP effect's: checked at load and against the lock, sent
// at reconcile to a real HTTP API, read by items and match, never "not
// found" on a failed answer, its stored result scrubbed of its secrets.
func TestUpstreamHTTPLookup(t *testing.T) {
	t.Parallel()
	const apiToken = "api-token-secret-value-42"
	notes := &notesServer{}
	var apiFails atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+apiToken || r.URL.Path != "/notes" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		if apiFails.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		notes.mu.Lock()
		defer notes.mu.Unlock()
		items := []map[string]any{}
		for i, body := range notes.notes {
			if strings.Contains(body, r.URL.Query().Get("q")) {
				// An answer that echoes the look-up's secret: scrubbed.
				items = append(items, map[string]any{"id": i + 1, "body": body, "seen_with": apiToken})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"notes": items})
	}))
	t.Cleanup(api.Close)
	file := `upstreams:
  notes:
    url: "{env.URL}"
    connect_timeout: 5s
    tools:
      create_note:
        guarantee: reconcilable
        marker: {arg: body, append: " <!-- {provider_key} -->"}
        lookup:
          url: "{env.API}/notes?q={provider_key}"
          headers: {Authorization: "Bearer {env.API_TOKEN}"}
          items: body.notes
          match: item.body.contains(provider_key)
`
	mcpURL := serveHTTP(t, notes.server())
	// Pinned with no problem: an HTTP look-up needs no tool of the upstream.
	c := bindServedEnv(t, file, func(n string) (string, bool) {
		switch n {
		case "URL":
			return mcpURL, true
		case "API":
			return api.URL, true
		case "API_TOKEN":
			return apiToken, true
		}
		return "", false
	})
	tool := recordedTool(t, c, "notes_create_note")
	req := &effects.Request{Args: json.RawMessage(`{"body":"hello"}`), ProviderKey: "pk-http-1"}

	_, found, err := tool.LookupRequest(context.Background(), req, time.Now())
	require.NoError(t, err)
	require.False(t, found, "nothing written yet")

	_, err = tool.Execute(context.Background(), req)
	require.NoError(t, err)
	result, found, err := tool.LookupRequest(context.Background(), req, time.Now())
	require.NoError(t, err)
	require.True(t, found)
	require.Contains(t, string(result), `"reconciled":true`)
	require.Contains(t, string(result), `"id":1`)
	require.NotContains(t, string(result), apiToken, "the look-up's secret is scrubbed")

	apiFails.Store(true)
	_, found, err = tool.LookupRequest(context.Background(), req, time.Now())
	require.False(t, found)
	require.ErrorContains(t, err, "lookup_failed", "a failed answer is never \"not found\"")
	require.NotContains(t, err.Error(), apiToken)
	require.NotContains(t, err.Error(), api.URL, "errors show the template")
}

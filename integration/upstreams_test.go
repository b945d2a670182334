package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/integration/internal/mcpupstreamtest"
	"github.com/outbox-dev/outbox/internal/sandbox/mcpupstream"
	"github.com/outbox-dev/outbox/outbox"
)

var (
	upstreamBinOnce sync.Once
	upstreamBin     string
	upstreamBinErr  error
)

// mcpupstreamBin builds the test upstream once per run.
func mcpupstreamBin(t testing.TB) string {
	t.Helper()
	upstreamBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcpupstream-bin-*")
		if err != nil {
			upstreamBinErr = err
			return
		}
		upstreamBin, upstreamBinErr = mcpupstreamtest.Build(context.Background(), dir)
	})
	require.NoError(t, upstreamBinErr)
	return upstreamBin
}

// upstreamsFile puts the test upstream (over stdio) behind outbox with a
// tool of each guarantee.
const upstreamsFile = `upstreams:
  notes:
    description: The test upstream.
    command: [%s]
    env: {MCPUPSTREAM_STATE: "{env.NOTES_STATE}"}
    wait: 8s
    timeout: 3s
    tools:
      create_note:
        guarantee: reconcilable
        marker: {arg: body, append: "\n<!-- outbox:{provider_key} -->"}
        lookup:
          tool: list_notes
          items: result.data.notes
          match: item.body.contains(provider_key)
      send_message:
        guarantee: deduplicated
        key_arg: idempotencyKey
        dedupe_window: 1h
      set_label:
        guarantee: at_most_once
        outcome:
          - when: error != null && error.code == -32602
            class: permanent
            code: label_refused
`

type upstreamEnv struct {
	*env
	state string
	file  string
}

func newUpstreamEnv(t *testing.T) *upstreamEnv {
	t.Helper()
	state := t.TempDir()
	file := filepath.Join(t.TempDir(), "effects.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, upstreamsFile, mcpupstreamBin(t)), 0o600))
	e := newEnv(t, "OUTBOX_EFFECTS_FILE="+file, "NOTES_STATE="+state, "OUTBOX_EFFECT_TIMEOUT=5s")
	return &upstreamEnv{env: e, state: state, file: file}
}

// mcpClient connects to serve's /mcp.
func mcpClient(t *testing.T, p *process) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "upstreams-test", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + p.addr + "/mcp"}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// toolAnswer is a recorded tool's structuredContent.
type toolAnswer struct {
	outbox.Intent
	Duplicate bool `json:"duplicate"`
	Upstream  *struct {
		Content           []map[string]any `json:"content"`
		StructuredContent map[string]any   `json:"structuredContent"`
		Reconciled        bool             `json:"reconciled"`
	} `json:"upstream"`
}

func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, *toolAnswer) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	if res.StructuredContent == nil {
		return res, nil
	}
	raw, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	var a toolAnswer
	require.NoError(t, json.Unmarshal(raw, &a))
	return res, &a
}

func counts(t *testing.T, state string) map[string]int {
	t.Helper()
	c, err := mcpupstream.Counts(state)
	require.NoError(t, err)
	return c
}

// TestUpstreams puts the test upstream behind serve: pin, mirror, record
// each write once however often it is called, pass reads through, and
// classify every fault the upstream injects per the tool's guarantee,
// counting effects at the upstream.
func TestUpstreams(t *testing.T) {
	t.Parallel()
	u := newUpstreamEnv(t)

	// Nothing starts without a pin.
	_, stderr, code := u.run("effects", "check", u.file)
	require.Equal(t, 0, code, stderr)
	stdout, stderr, code := u.run("effects", "pin", u.file)
	require.Equal(t, 0, code, "pin: %s%s", stdout, stderr)
	require.Regexp(t, `notes\s+create_note\s+notes_create_note\s+recorded\s+reconcilable`, stdout)
	require.Regexp(t, `notes\s+list_notes\s+notes_list_notes\s+passthrough`, stdout)
	require.Contains(t, stdout, "pinned 1 upstreams")
	_, stderr, code = u.run("effects", "check", u.file)
	require.Equal(t, 0, code, stderr)

	p := u.serve()
	s := mcpClient(t, p)

	// The mirrored tools: recorded ones with outbox's arguments and
	// without key_arg, pass-through ones as the upstream lists them.
	listed := map[string]*mcp.Tool{}
	for tool, err := range s.Tools(context.Background(), nil) {
		require.NoError(t, err)
		listed[tool.Name] = tool
	}
	require.Contains(t, listed, "notes_create_note")
	require.Contains(t, listed, "notes_list_notes")
	schema, _ := json.Marshal(listed["notes_send_message"].InputSchema)
	require.Contains(t, string(schema), "idempotency_key")
	require.NotContains(t, string(schema), "idempotencyKey", "outbox sets key_arg")
	passSchema, _ := json.Marshal(listed["notes_list_notes"].InputSchema)
	require.NotContains(t, string(passSchema), "idempotency_key")

	t.Run("RepeatedCallActsOnce", func(t *testing.T) {
		args := map[string]any{"title": "t1", "body": "hello", "idempotency_key": "note-1"}
		res1, a1 := callTool(t, s, "notes_create_note", args)
		require.False(t, res1.IsError)
		require.Equal(t, outbox.StateSucceeded, a1.State)
		require.NotNil(t, a1.Upstream)
		res2, a2 := callTool(t, s, "notes_create_note", args)
		require.True(t, a2.Duplicate)
		require.Equal(t, a1.Upstream, a2.Upstream, "a duplicate gets the first answer")
		require.Equal(t, res1.Content[0], res2.Content[0])
		notes, err := mcpupstream.Notes(u.state)
		require.NoError(t, err)
		require.Len(t, notes, 1)
		require.Contains(t, notes[0].Body, "outbox:"+a1.ProviderKey, "the marker carries the provider key")

		// The console's page names the upstream and its tool.
		resp, err := http.Get("http://" + p.addr + "/console/intents/default/note-1")
		require.NoError(t, err)
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(page))
		require.Contains(t, string(page), "MCP upstream")
		require.Contains(t, string(page), "<code>create_note</code>")
	})

	t.Run("PassThrough", func(t *testing.T) {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "notes_list_notes", Arguments: map[string]any{}})
		require.NoError(t, err)
		require.False(t, res.IsError)
		before := counts(t, u.state)
		_, err = s.CallTool(context.Background(), &mcp.CallToolParams{Name: "notes_get_status", Arguments: map[string]any{}})
		require.NoError(t, err)
		require.Equal(t, before, counts(t, u.state), "a read acts on nothing")
	})

	t.Run("OverHTTP", func(t *testing.T) {
		// A recorded tool is an effect like any other: listed, and
		// enqueueable over HTTP.
		resp, err := http.Get("http://" + p.addr + "/v1/effects")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), `"notes_send_message"`)
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/v1/intents", strings.NewReader(`{"effect":"notes_send_message","args":{"to":"dee","text":"over http"}}`))
		req.Header.Set("Idempotency-Key", "http-msg-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		got := u.wait("http-msg-1", 30*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State)
		// The same key over MCP is the same action: one message.
		_, a := callTool(t, s, "notes_send_message", map[string]any{"to": "dee", "text": "over http", "idempotency_key": "http-msg-1"})
		require.True(t, a.Duplicate)
		msgs, err := mcpupstream.Messages(u.state)
		require.NoError(t, err)
		n := 0
		for _, m := range msgs {
			if m.To == "dee" {
				n++
			}
		}
		require.Equal(t, 1, n)
	})

	t.Run("KeyArgRefused", func(t *testing.T) {
		res, _ := callTool(t, s, "notes_send_message", map[string]any{"to": "a", "text": "b", "idempotencyKey": "mine", "idempotency_key": "m-x"})
		require.True(t, res.IsError)
		require.Contains(t, res.Content[0].(*mcp.TextContent).Text, "invalid_args")
	})

	t.Run("DroppedAtMostOnceIsUnknown", func(t *testing.T) {
		require.NoError(t, mcpupstream.SetFault(u.state, "set_label", mcpupstream.Fault{Mode: mcpupstream.FaultActThenDrop}))
		res, a := callTool(t, s, "notes_set_label", map[string]any{"item": "i1", "label": "l1", "idempotency_key": "label-1"})
		require.True(t, res.IsError)
		require.Equal(t, outbox.StateUnknown, a.State)
		require.Contains(t, res.Content[0].(*mcp.TextContent).Text, "do not retry")
		_, a2 := callTool(t, s, "notes_set_label", map[string]any{"item": "i1", "label": "l1", "idempotency_key": "label-1"})
		require.Equal(t, outbox.StateUnknown, a2.State)
		calls, err := mcpupstream.Calls(u.state)
		require.NoError(t, err)
		require.Equal(t, 1, calls["set_label"], "never sent again")
	})

	t.Run("RefusedIsPermanent", func(t *testing.T) {
		require.NoError(t, mcpupstream.SetFault(u.state, "set_label", mcpupstream.Fault{Mode: mcpupstream.FaultRefuse}))
		res, a := callTool(t, s, "notes_set_label", map[string]any{"item": "i2", "label": "l2", "idempotency_key": "label-2"})
		require.True(t, res.IsError)
		require.Equal(t, outbox.StateFailed, a.State)
		require.Equal(t, "label_refused", a.Error.Code, "the tool's outcome rule")
	})

	t.Run("DroppedReconcilableIsLookedUp", func(t *testing.T) {
		before := counts(t, u.state)["create_note"]
		require.NoError(t, mcpupstream.SetFault(u.state, "create_note", mcpupstream.Fault{Mode: mcpupstream.FaultActThenDrop}))
		_, _ = callTool(t, s, "notes_create_note", map[string]any{"title": "t2", "body": "x", "idempotency_key": "note-2"})
		got := u.wait("note-2", 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "found by the look-up: %+v", got.Error)
		require.GreaterOrEqual(t, got.Attempts, 2, "the first attempt's answer was lost")
		require.Contains(t, string(got.Result), `"reconciled": true`)
		require.Equal(t, before+1, counts(t, u.state)["create_note"], "one note")
	})

	t.Run("IsErrorReconcilableIsLookedUp", func(t *testing.T) {
		before := counts(t, u.state)["create_note"]
		require.NoError(t, mcpupstream.SetFault(u.state, "create_note", mcpupstream.Fault{Mode: mcpupstream.FaultActThenIsError}))
		_, _ = callTool(t, s, "notes_create_note", map[string]any{"title": "t3", "body": "x", "idempotency_key": "note-3"})
		got := u.wait("note-3", 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State)
		require.Equal(t, before+1, counts(t, u.state)["create_note"])
	})

	t.Run("SlowDeduplicatedIsSentAgainUnderItsKey", func(t *testing.T) {
		require.NoError(t, mcpupstream.SetFault(u.state, "send_message", mcpupstream.Fault{Mode: mcpupstream.FaultActThenSleep, Delay: 30 * time.Second}))
		_, _ = callTool(t, s, "notes_send_message", map[string]any{"to": "ann", "text": "hi", "idempotency_key": "msg-1"})
		got := u.wait("msg-1", 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State)
		require.GreaterOrEqual(t, got.Attempts, 2, "the first attempt timed out: %+v", got)
		msgs, err := mcpupstream.Messages(u.state)
		require.NoError(t, err)
		n := 0
		for _, m := range msgs {
			if m.To == "ann" {
				n++
			}
		}
		require.Equal(t, 1, n, "deduplicated on the provider key")
	})

	t.Run("KillServeMidCall", func(t *testing.T) {
		// A call under way at the upstream when serve dies: its child dies
		// with it (parent-death signal) before acting.
		require.NoError(t, mcpupstream.SetFault(u.state, "create_note", mcpupstream.Fault{Mode: mcpupstream.FaultHang}))
		before := counts(t, u.state)["create_note"]
		go func() {
			_, _ = s.CallTool(context.Background(), &mcp.CallToolParams{Name: "notes_create_note",
				Arguments: map[string]any{"title": "t4", "body": "x", "idempotency_key": "note-4"}})
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		started, err := mcpupstream.Started(u.state)
		require.NoError(t, err)
		_, err = mcpupstreamtest.WaitStarted(ctx, u.state, "create_note", started["create_note"]+1)
		require.NoError(t, err, "the fault landed in a call under way")
		p.kill9()
		p = u.serve()
		got := u.wait("note-4", 90*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "looked up, not found, sent again: %+v", got.Error)
		require.Equal(t, before+1, counts(t, u.state)["create_note"], "one note")
		t.Logf("upstreams: kill -9 mid-call: reconcilable intent %s, notes made %d", got.State, counts(t, u.state)["create_note"]-before)
	})

	t.Run("DriftWithdrawsUntilRestored", func(t *testing.T) {
		// The upstream changes send_message's schema under the same name:
		// outbox withdraws it (list_changed), its calls wait not_sent, a
		// description change alone is no drift, and the pinned listing
		// back restores it.
		require.NoError(t, mcpupstream.SetDrift(u.state, mcpupstream.Drift{Changed: []string{"send_message"}, Described: []string{"create_note"}}))
		t.Cleanup(func() { _ = mcpupstream.SetDrift(u.state, mcpupstream.Drift{}) })
		s2 := mcpClient(t, p)
		require.Eventually(t, func() bool {
			res, err := s2.CallTool(context.Background(), &mcp.CallToolParams{Name: "notes_list_notes", Arguments: map[string]any{}})
			_ = res
			return err == nil && strings.Contains(p.output(), "upstream tool withdrawn")
		}, 30*time.Second, 100*time.Millisecond, "withdrawn on list_changed")
		require.NotContains(t, p.output(), `tool=create_note code=upstream_drift`, "a description is no drift")
		names := map[string]bool{}
		for tool, err := range s2.Tools(context.Background(), nil) {
			require.NoError(t, err)
			names[tool.Name] = true
		}
		require.False(t, names["notes_send_message"], "a drifted tool is not listed")
		require.True(t, names["notes_create_note"])
		// A call of the withdrawn tool is refused, recording nothing...
		res, a := callTool(t, s2, "notes_send_message", map[string]any{"to": "eve", "text": "drift", "idempotency_key": "msg-drift-mcp"})
		require.True(t, res.IsError)
		require.Nil(t, a)
		require.Contains(t, res.Content[0].(*mcp.TextContent).Text, "upstream_drift")
		_, err := u.client.Get(context.Background(), "", "msg-drift-mcp")
		require.ErrorIs(t, err, outbox.ErrNotFound)
		// ...and an intent recorded another way (the API, SQL) waits
		// not_sent until the pin holds again.
		_, err = u.client.Enqueue(context.Background(), &outbox.EnqueueParams{Key: "msg-drift", Effect: "notes_send_message",
			Args: map[string]any{"to": "eve", "text": "drift"}})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			got, err := u.client.Get(context.Background(), "", "msg-drift")
			return err == nil && got.Error != nil && got.Error.Code == "upstream_drift"
		}, 30*time.Second, 100*time.Millisecond)
		require.NoError(t, mcpupstream.SetDrift(u.state, mcpupstream.Drift{}))
		got := u.wait("msg-drift", 90*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "%+v", got.Error)
		status, body := func() (int, string) {
			resp, err := http.Get("http://" + p.addr + "/metrics")
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}()
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, `outbox_upstream_drift_total{tool="send_message",upstream="notes"}`)
	})

	t.Run("OverStdio", func(t *testing.T) {
		// outboxd mcp mirrors the same tools; serve's workers carry out
		// what it records.
		cmd := exec.Command(outboxd(t), "mcp")
		cmd.Env = u.vars
		c := mcp.NewClient(&mcp.Implementation{Name: "stdio-host", Version: "1"}, nil)
		sess, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		require.NoError(t, err)
		defer sess.Close()
		res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "notes_get_status", Arguments: map[string]any{}})
		require.NoError(t, err)
		require.False(t, res.IsError, "pass-through over stdio: %v", res.Content)
		before := counts(t, u.state)["create_note"]
		_, a := callTool(t, sess, "notes_create_note", map[string]any{"title": "stdio", "body": "x", "idempotency_key": "note-stdio"})
		require.Contains(t, []outbox.State{outbox.StatePending, outbox.StateRunning, outbox.StateSucceeded}, a.State)
		got := u.wait("note-stdio", 30*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State)
		require.Equal(t, before+1, counts(t, u.state)["create_note"])
	})

	c := counts(t, u.state)
	fmt.Printf("TestUpstreams: create_note=%d send_message=%d set_label calls, effects=%v\n", c["create_note"], c["send_message"], c)
}

// upstreamsHTTPFile puts the test upstream, over streamable HTTP, behind
// outbox.
const upstreamsHTTPFile = `upstreams:
  notes:
    url: "{env.NOTES_URL}"
    wait: 8s
    timeout: 3s
    connect_timeout: 1s
    tools:
      create_note:
        guarantee: reconcilable
        marker: {arg: body, prepend: "[outbox:{provider_key}] "}
        lookup:
          tool: list_notes
          items: result.data.notes
          match: item.body.startsWith("[outbox:" + provider_key + "]")
      send_message:
        guarantee: deduplicated
        key_arg: idempotencyKey
        dedupe_window: 1h
`

// startHTTPUpstream starts the test upstream over HTTP on addr. The port
// may be held for a moment by another test's listener (freeAddr closes the
// one it found): the start is tried again for a few seconds.
func startHTTPUpstream(t testing.TB, state, addr string) (url string, stop func()) {
	t.Helper()
	var cmd *exec.Cmd
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		cmd = exec.Command(mcpupstreamBin(t), "--http", addr)
		cmd.Env = []string{mcpupstreamtest.StateEnv + "=" + state}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if url, err = mcpupstreamtest.StartHTTP(context.Background(), cmd); err == nil {
			break
		}
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if time.Now().After(deadline) {
			t.Fatalf("starting the test upstream on %s: %v: %s", addr, err, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return url, stop
}

// freeAddr returns a loopback address nothing listens on (yet).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestUpstreamsHTTP runs a streamable HTTP upstream behind serve: a
// dropped connection after the upstream acted is looked up (reconcilable)
// or resent under its key (deduplicated), and an upstream that is down
// leaves its calls pending, not_sent, until it is back; serve never stops.
func TestUpstreamsHTTP(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	addr := freeAddr(t)
	url, stop := startHTTPUpstream(t, state, addr)
	file := filepath.Join(t.TempDir(), "effects.yaml")
	require.NoError(t, os.WriteFile(file, []byte(upstreamsHTTPFile), 0o600))
	u := newEnv(t, "OUTBOX_EFFECTS_FILE="+file, "NOTES_URL="+url, "OUTBOX_EFFECT_TIMEOUT=5s")
	stdout, stderr, code := u.run("effects", "pin", file)
	require.Equal(t, 0, code, "pin: %s%s", stdout, stderr)
	p := u.serve()
	s := mcpClient(t, p)

	t.Run("DroppedReconcilableIsLookedUp", func(t *testing.T) {
		require.NoError(t, mcpupstream.SetFault(state, "create_note", mcpupstream.Fault{Mode: mcpupstream.FaultActThenDrop}))
		_, _ = callTool(t, s, "notes_create_note", map[string]any{"title": "h1", "body": "x", "idempotency_key": "h-note-1"})
		got := u.wait("h-note-1", 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "%+v", got.Error)
		require.GreaterOrEqual(t, got.Attempts, 2, "the first attempt's answer was lost")
		require.Equal(t, 1, counts(t, state)["create_note"])
	})

	t.Run("DroppedDeduplicatedIsResent", func(t *testing.T) {
		require.NoError(t, mcpupstream.SetFault(state, "send_message", mcpupstream.Fault{Mode: mcpupstream.FaultActThenDrop}))
		_, _ = callTool(t, s, "notes_send_message", map[string]any{"to": "bo", "text": "hi", "idempotency_key": "h-msg-1"})
		got := u.wait("h-msg-1", 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "%+v", got.Error)
		require.GreaterOrEqual(t, got.Attempts, 2, "the first attempt's answer was lost")
		msgs, err := mcpupstream.Messages(state)
		require.NoError(t, err)
		require.Len(t, msgs, 1)
	})

	t.Run("UpstreamDownWaitsNotSent", func(t *testing.T) {
		stop()
		res, a := callTool(t, s, "notes_send_message", map[string]any{"to": "cy", "text": "later", "idempotency_key": "h-msg-2"})
		require.False(t, res.IsError, "pending is no error")
		require.Contains(t, []outbox.State{outbox.StatePending, outbox.StateRunning}, a.State)
		// The attempt found no session: not sent, back to pending.
		require.Eventually(t, func() bool {
			got, err := u.client.Get(context.Background(), "", "h-msg-2")
			return err == nil && got.Error != nil && got.Error.Code == "upstream_unavailable"
		}, 30*time.Second, 100*time.Millisecond)
		startHTTPUpstream(t, state, addr)
		got := u.wait("h-msg-2", 90*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "%+v", got.Error)
		msgs, err := mcpupstream.Messages(state)
		require.NoError(t, err)
		require.Len(t, msgs, 2)
	})
}

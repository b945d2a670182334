// Package mcpraw is an MCP client for tests, written from the 2026-07-28
// specification and the tasks extension (SEP-2663) rather than taken from an
// SDK: it sends JSON-RPC as the specification spells it, over streamable
// HTTP or stdio, so that a test sees the wire, field names included. Only
// tests use it; it never links into outboxd.
package mcpraw

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/mcpwire"
)

// TasksExtension is the tasks extension's identifier.
const TasksExtension = mcpwire.TasksExtension

// Client sends requests statelessly: each carries its protocol version,
// client info and capabilities in params._meta, and a fresh request id.
type Client struct {
	// Elicit declares form elicitation.
	Elicit bool
	// ElicitURL declares URL-mode elicitation.
	ElicitURL bool
	// Name is the client's name (clientInfo). Defaults to "raw-host".
	Name string
	// Tasks declares the tasks extension.
	Tasks bool
	// Token is sent as a bearer token over HTTP.
	Token string
	// URL is the streamable HTTP endpoint; empty for stdio (Stdio).
	URL string

	ids   atomic.Int64
	stdio *stdio
}

// Response is a JSON-RPC response.
type Response = mcpwire.Response

// Stdio returns a client that writes requests, one JSON text a line, to w
// and reads responses from r (an `outboxd mcp` process's stdin and stdout).
func Stdio(w io.Writer, r io.Reader) *Client {
	s := &stdio{w: w, waiting: map[int64]chan []byte{}, listens: map[int64]chan []byte{}}
	go s.read(r)
	return &Client{stdio: s}
}

type stdio struct {
	w       io.Writer
	mu      sync.Mutex
	waiting map[int64]chan []byte
	// listens receive the messages of their subscription: notifications
	// stamped with its id, and the listen's response.
	listens map[int64]chan []byte
}

func (s *stdio) read(r io.Reader) {
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for id, ch := range s.listens {
			close(ch)
			delete(s.listens, id)
		}
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var probe struct {
			ID     *int64 `json:"id"`
			Params struct {
				Meta struct {
					SubscriptionID *int64 `json:"io.modelcontextprotocol/subscriptionId"`
				} `json:"_meta"`
			} `json:"params"`
		}
		line := append([]byte(nil), sc.Bytes()...)
		if json.Unmarshal(line, &probe) != nil {
			continue
		}
		s.mu.Lock()
		switch {
		case probe.ID != nil && s.listens[*probe.ID] != nil:
			// A listen's response ends it.
			s.listens[*probe.ID] <- line
			close(s.listens[*probe.ID])
			delete(s.listens, *probe.ID)
		case probe.ID != nil:
			if ch := s.waiting[*probe.ID]; ch != nil {
				ch <- line
			}
			delete(s.waiting, *probe.ID)
		case probe.Params.Meta.SubscriptionID != nil:
			if ch := s.listens[*probe.Params.Meta.SubscriptionID]; ch != nil {
				ch <- line
			}
		}
		s.mu.Unlock()
	}
}

func (c *Client) meta() map[string]any {
	name := c.Name
	if name == "" {
		name = "raw-host"
	}
	meta := mcpwire.Meta(name, c.Tasks, c.Elicit)
	if c.ElicitURL {
		caps := meta["io.modelcontextprotocol/clientCapabilities"].(map[string]any)
		elicit, _ := caps["elicitation"].(map[string]any)
		if elicit == nil {
			elicit = map[string]any{}
			caps["elicitation"] = elicit
		}
		elicit["url"] = map[string]any{}
	}
	return meta
}

// Do sends method with params (to which _meta is added) and returns the
// response.
func (c *Client) Do(t testing.TB, method string, params map[string]any) *Response {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = c.meta()
	id := c.ids.Add(1)
	body, err := mcpwire.Request(id, method, params)
	require.NoError(t, err)
	var raw []byte
	if c.stdio != nil {
		raw, err = c.stdio.roundTrip(id, body)
	} else {
		raw, err = mcpwire.Post(t.Context(), http.DefaultClient, c.URL, c.Token, method, params, body)
	}
	require.NoError(t, err, "%s", method)
	var out Response
	require.NoError(t, json.Unmarshal(raw, &out), "response: %s", raw)
	return &out
}

func (s *stdio) roundTrip(id int64, body []byte) ([]byte, error) {
	ch := make(chan []byte, 1)
	s.mu.Lock()
	s.waiting[id] = ch
	_, err := s.w.Write(append(body, '\n'))
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case line := <-ch:
		return line, nil
	case <-time.After(30 * time.Second):
		return nil, errors.New("no response within 30s")
	}
}

// Task is a task as the extension shapes it on the wire.
type Task struct {
	ResultType     string                     `json:"resultType"`
	TaskID         string                     `json:"taskId"`
	Status         string                     `json:"status"`
	StatusMessage  string                     `json:"statusMessage"`
	CreatedAt      string                     `json:"createdAt"`
	LastUpdatedAt  string                     `json:"lastUpdatedAt"`
	TTLMs          *int64                     `json:"ttlMs"`
	PollIntervalMs int64                      `json:"pollIntervalMs"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests"`
	Result         *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
}

// CallTask calls tool and requires a task back.
func (c *Client) CallTask(t testing.TB, tool string, args map[string]any) *Task {
	t.Helper()
	resp := c.Do(t, "tools/call", map[string]any{"name": tool, "arguments": args})
	require.Nil(t, resp.Error)
	var task Task
	require.NoError(t, json.Unmarshal(resp.Result, &task))
	require.Equal(t, "task", task.ResultType, "result: %s", resp.Result)
	require.NotEmpty(t, task.TaskID)
	return &task
}

// GetTask sends tasks/get and requires the task back.
func (c *Client) GetTask(t testing.TB, id string) *Task {
	t.Helper()
	resp := c.Do(t, "tasks/get", map[string]any{"taskId": id})
	require.Nil(t, resp.Error, "tasks/get: %s", resp.Result)
	var task Task
	require.NoError(t, json.Unmarshal(resp.Result, &task))
	require.Equal(t, "complete", task.ResultType)
	require.Equal(t, id, task.TaskID)
	return &task
}

// RequireError requires resp to be the JSON-RPC error code.
func RequireError(t testing.TB, resp *Response, code int) {
	t.Helper()
	require.NotNil(t, resp.Error, "expected error %d, got result %s", code, resp.Result)
	require.Equal(t, code, resp.Error.Code, resp.Error.Message)
}

// Message is one JSON-RPC message of a listen stream: a notification
// (Method, Params) or the listen's response (Result or Error).
type Message struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Response
}

// Listen is an open subscriptions/listen stream.
type Listen struct {
	// ID is the listen request's id, the subscription's id.
	ID int64
	// Status is the HTTP status of the answer (200 over stdio).
	Status int

	msgs  <-chan []byte
	close func()
}

// Listen sends subscriptions/listen with notifications as
// params.notifications and returns the stream. Over HTTP a JSON answer (an
// error) is the stream's one message.
func (c *Client) Listen(t testing.TB, notifications map[string]any) *Listen {
	t.Helper()
	params := map[string]any{"notifications": notifications, "_meta": c.meta()}
	id := c.ids.Add(1)
	body, err := mcpwire.Request(id, "subscriptions/listen", params)
	require.NoError(t, err)
	msgs := make(chan []byte, 100)
	l := &Listen{ID: id, Status: http.StatusOK, msgs: msgs}
	if c.stdio != nil {
		c.stdio.mu.Lock()
		c.stdio.listens[id] = msgs
		_, err = c.stdio.w.Write(append(body, '\n'))
		c.stdio.mu.Unlock()
		require.NoError(t, err)
		l.close = func() {
			cancel, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
				"params": map[string]any{"requestId": id, "reason": "done"}})
			if err == nil {
				c.stdio.mu.Lock()
				_, _ = c.stdio.w.Write(append(cancel, '\n'))
				c.stdio.mu.Unlock()
			}
		}
		t.Cleanup(l.Close)
		return l
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", mcpwire.ProtocolVersion)
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	l.Status = resp.StatusCode
	l.close = cancel
	t.Cleanup(l.Close)
	go func() {
		defer close(msgs)
		defer resp.Body.Close()
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			msgs <- b
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				msgs <- []byte(data)
			}
		}
	}()
	return l
}

// Next returns the stream's next message; nil once the stream ended.
func (l *Listen) Next(t testing.TB) *Message {
	t.Helper()
	select {
	case b, ok := <-l.msgs:
		if !ok {
			return nil
		}
		var m Message
		require.NoError(t, json.Unmarshal(b, &m), "message: %s", b)
		return &m
	case <-time.After(30 * time.Second):
		t.Fatal("no message on the listen stream within 30s")
		return nil
	}
}

// Close stops the subscription: over HTTP it closes the stream, over stdio
// it sends notifications/cancelled.
func (l *Listen) Close() {
	if l.close != nil {
		l.close()
		l.close = nil
	}
}

// subscriptionMeta is the _meta of a listen's messages.
type subscriptionMeta struct {
	Meta struct {
		SubscriptionID *int64 `json:"io.modelcontextprotocol/subscriptionId"`
	} `json:"_meta"`
}

// requireSubscription requires the _meta of raw to name the listen.
func (l *Listen) requireSubscription(t testing.TB, raw json.RawMessage) {
	t.Helper()
	var m subscriptionMeta
	require.NoError(t, json.Unmarshal(raw, &m))
	require.NotNil(t, m.Meta.SubscriptionID, "no subscription id in %s", raw)
	require.Equal(t, l.ID, *m.Meta.SubscriptionID)
}

// Ack reads the stream's first message, which must be the
// acknowledgement, and returns the task ids it agreed to (nil when none)
// and all it agreed to.
func (l *Listen) Ack(t testing.TB) (taskIDs []string, agreed map[string]json.RawMessage) {
	t.Helper()
	m := l.Next(t)
	require.NotNil(t, m, "the stream ended without an acknowledgement")
	require.Equal(t, "notifications/subscriptions/acknowledged", m.Method, "first message: %+v", m)
	l.requireSubscription(t, m.Params)
	var params struct {
		Notifications map[string]json.RawMessage `json:"notifications"`
	}
	require.NoError(t, json.Unmarshal(m.Params, &params))
	if raw, ok := params.Notifications["taskIds"]; ok {
		require.NoError(t, json.Unmarshal(raw, &taskIDs))
	}
	return taskIDs, params.Notifications
}

// NextTask reads the stream's next message, which must be a task status
// notification of the listen, and returns its task.
func (l *Listen) NextTask(t testing.TB) *Task {
	t.Helper()
	m := l.Next(t)
	require.NotNil(t, m, "the stream ended")
	require.Equal(t, "notifications/tasks", m.Method, "message: %+v", m)
	l.requireSubscription(t, m.Params)
	var task Task
	require.NoError(t, json.Unmarshal(m.Params, &task))
	require.NotEmpty(t, task.TaskID)
	return &task
}

// RequireEnd reads the listen's result, which must come next, and then the
// stream's end.
func (l *Listen) RequireEnd(t testing.TB) {
	t.Helper()
	m := l.Next(t)
	require.NotNil(t, m, "the stream ended without the listen's result")
	require.Empty(t, m.Method, "a notification after every task ended: %+v", m)
	require.Nil(t, m.Error)
	l.requireSubscription(t, m.Result)
	var res struct {
		ResultType string `json:"resultType"`
	}
	require.NoError(t, json.Unmarshal(m.Result, &res))
	require.Equal(t, "complete", res.ResultType)
	require.Nil(t, l.Next(t), "the stream goes on after the listen's result")
}

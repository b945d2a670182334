// Package mcpraw is an MCP client for tests, written from the 2026-07-28
// specification and the tasks extension (SEP-2663) rather than taken from an
// SDK: it sends JSON-RPC as the specification spells it, over streamable
// HTTP or stdio, so that a test sees the wire, field names included. Only
// tests use it; it never links into outboxd.
package mcpraw

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
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
	s := &stdio{w: w, waiting: map[int64]chan []byte{}}
	go s.read(r)
	return &Client{stdio: s}
}

type stdio struct {
	w       io.Writer
	mu      sync.Mutex
	waiting map[int64]chan []byte
}

func (s *stdio) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var probe struct {
			ID *int64 `json:"id"`
		}
		line := append([]byte(nil), sc.Bytes()...)
		if json.Unmarshal(line, &probe) != nil || probe.ID == nil {
			continue // a notification
		}
		s.mu.Lock()
		ch := s.waiting[*probe.ID]
		delete(s.waiting, *probe.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- line
		}
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

// Package mcpraw is an MCP client for tests, written from the 2026-07-28
// specification and the tasks extension (SEP-2663) rather than taken from an
// SDK: it sends JSON-RPC as the specification spells it, over streamable
// HTTP or stdio, so that a test sees the wire, field names included. Only
// tests use it; it never links into outboxd.
package mcpraw

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TasksExtension is the tasks extension's identifier.
const TasksExtension = "io.modelcontextprotocol/tasks"

// ProtocolVersion is the protocol version the client speaks.
const ProtocolVersion = "2026-07-28"

// Client sends requests statelessly: each carries its protocol version,
// client info and capabilities in params._meta, and a fresh request id.
type Client struct {
	// Elicit declares form elicitation.
	Elicit bool
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
type Response struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

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
	caps := map[string]any{}
	if c.Tasks {
		caps["extensions"] = map[string]any{TasksExtension: map[string]any{}}
	}
	if c.Elicit {
		caps["elicitation"] = map[string]any{"form": map[string]any{}}
	}
	name := c.Name
	if name == "" {
		name = "raw-host"
	}
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    ProtocolVersion,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": name, "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
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
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	require.NoError(t, err)
	var raw []byte
	if c.stdio != nil {
		raw, err = c.stdio.roundTrip(id, body)
	} else {
		raw, err = c.post(t, method, params, body)
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

func (c *Client) post(t testing.TB, method string, params map[string]any, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", ProtocolVersion)
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok && method == "tools/call" {
		req.Header.Set("Mcp-Name", name)
	}
	if id, ok := params["taskId"].(string); ok {
		// The extension's routing header.
		req.Header.Set("Mcp-Name", id)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// 2026-07-28 answers a request's JSON-RPC error with an HTTP status of
	// its own (400 for invalid params), the body the JSON-RPC error.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return io.ReadAll(resp.Body)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var probe struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal([]byte(data), &probe) == nil && len(probe.ID) > 0 {
				return []byte(data), nil
			}
		}
	}
	return nil, errors.New("the event stream ended without a response")
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

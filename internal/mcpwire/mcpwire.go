// Package mcpwire sends one MCP request over streamable HTTP as the
// 2026-07-28 specification spells it, statelessly, and returns the JSON-RPC
// response as it came: for a host that must see what an SDK hides (a
// CreateTaskResult where the SDK expects a tool result). outboxd demo's host
// speaks through it, and so do the tests' raw client (package mcpraw).
package mcpwire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ProtocolVersion is the protocol version the requests declare.
const ProtocolVersion = "2026-07-28"

// TasksExtension is the tasks extension's identifier.
const TasksExtension = "io.modelcontextprotocol/tasks"

// Response is a JSON-RPC response.
type Response struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// Meta returns a request's _meta for a client named name that declares the
// tasks extension (tasks) and form elicitation (elicit).
func Meta(name string, tasks, elicit bool) map[string]any {
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{TasksExtension: map[string]any{}}
	}
	if elicit {
		caps["elicitation"] = map[string]any{"form": map[string]any{}}
	}
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    ProtocolVersion,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": name, "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
}

// Post sends the JSON-RPC request body (method, whose params are params) to
// url with hc, and returns the raw response: the JSON body, or the event
// stream's message that carries an id. token, when set, is sent as a
// bearer token.
func Post(ctx context.Context, hc *http.Client, url, token, method string, params map[string]any, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
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
		// The tasks extension's routing header.
		req.Header.Set("Mcp-Name", id)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// 2026-07-28 answers a request's JSON-RPC error with an HTTP status of
	// its own (400 for invalid params), the body the JSON-RPC error.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
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

// Request encodes a JSON-RPC request of method with params and id.
func Request(id int64, method string, params map[string]any) ([]byte, error) {
	return json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/outbox"
)

// toolError is a tool error's JSON, its second text block:
// {"error": {"code", "message", "field"}}, as the HTTP API's error bodies.
type toolError struct {
	Error toolErrorBody `json:"error"`
}

type toolErrorBody struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// Earlier names the intent of a possible_duplicate.
	Earlier *earlierIntent `json:"earlier,omitempty"`
}

// earlierIntent is the intent a possible_duplicate was recorded as.
type earlierIntent struct {
	AgeSeconds int64        `json:"age_seconds"`
	Key        string       `json:"key"`
	State      outbox.State `json:"state"`
}

// jsonResult is a successful tool result: v as structured content, and as
// JSON text for clients that read only text.
func jsonResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("error encoding tool result: %w", err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
	}, nil
}

// errorResult is the tool result for err: isError with the error's code, so
// that the model sees it and can correct the call (docs/agents.md: a tool
// error is a result, not a protocol error). An error that carries no code is
// not the caller's: it is logged, and answered as internal_error without
// details.
func (s *server) errorResult(ctx context.Context, tool string, err error) *mcp.CallToolResult {
	// The code, field and message are apierror's, shared with the HTTP
	// API; the earlier intent of a possible_duplicate is MCP's addition.
	p := apierror.From(err, keyArgument)
	body := toolErrorBody{Code: p.Code, Field: p.Field, Message: p.Message}
	if d := p.PossibleDuplicate; d != nil {
		body.Earlier = &earlierIntent{AgeSeconds: int64(d.Age.Seconds()), Key: d.Earlier.Key, State: d.Earlier.State}
	}
	noteToolError(ctx, p.Code)
	if p.Internal && ctx.Err() == nil {
		s.logger.ErrorContext(ctx, "mcp tool call failed", "tool", tool, "error", err)
	}
	text := body.Code + ": "
	if body.Field != "" {
		text += body.Field + ": "
	}
	text += body.Message
	structured, _ := json.Marshal(toolError{Error: body}) // plain values only: cannot fail
	// No structuredContent: clients (the TypeScript SDK among them) check
	// it against the tool's outputSchema, which describes the intent, even
	// on an error. The error's JSON is the second text block instead, after
	// the line a model reads.
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: text}, &mcp.TextContent{Text: string(structured)}},
		IsError: true,
	}
}

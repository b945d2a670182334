package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/outbox"
)

// CodeInternal is the code of a tool error that is not the caller's: the
// database is unreachable, for example. Its message says no more; the log
// has the details.
const CodeInternal = "internal_error"

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
	body := toolErrorBody{Code: outbox.ErrorCode(err)}
	var (
		keyReused *outbox.KeyReusedError
		outboxErr *outbox.Error
		pgErr     *pgconn.PgError
	)
	var possibleDup *outbox.PossibleDuplicateError
	switch {
	case errors.As(err, &possibleDup):
		body.Field = keyArgument
		body.Message = fmt.Sprintf("the same action (this tool, these arguments) was recorded %s ago under another key, %q, and is %s. "+
			"If this call is a retry of that action, call again with idempotency_key %q, or get_intent it. "+
			"Only if the user really wants a second, identical action, call again with new_action true.",
			possibleDup.Age.Round(time.Second), possibleDup.Earlier.Key, possibleDup.Earlier.State, possibleDup.Earlier.Key)
		body.Earlier = &earlierIntent{AgeSeconds: int64(possibleDup.Age.Seconds()), Key: possibleDup.Earlier.Key, State: possibleDup.Earlier.State}
	case errors.As(err, &keyReused):
		body.Field = keyArgument
		body.Message = fmt.Sprintf("this key was first used for another action (effect %s, other arguments): "+
			"use a new key for a new action, or the first action's exact arguments to retry it", keyReused.Existing.Effect)
	case errors.As(err, &outboxErr):
		body.Field = outboxErr.Field
		body.Message = outboxErr.Message
	case errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || pgErr.Code == "54001"):
		// The database refused a value the library's checks let through
		// (a number beyond jsonb's range, 1e1000000): the caller's mistake.
		body = toolErrorBody{Code: outbox.CodeInvalidArgs, Field: "args", Message: "refused by the database: " + pgErr.Message}
	default:
		if ctx.Err() == nil {
			s.logger.ErrorContext(ctx, "mcp tool call failed", "tool", tool, "error", err)
		}
		body = toolErrorBody{Code: CodeInternal, Message: "internal error; the server's log has the details"}
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

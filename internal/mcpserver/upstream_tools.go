package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/outbox"
)

// PassthroughTool is a tool of an MCP upstream forwarded live: read-only by
// the file's declaration or the upstream's hint, never recorded
// (internal/upstream, PassthroughTool).
type PassthroughTool interface {
	Name() string
	UpstreamName() string
	Description() string
	InputSchema() json.RawMessage
	Annotations() *mcp.ToolAnnotations
	Namespaces() []string
	Withdrawn() string
	Call(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error)
}

// upstreamEffect is a recorded tool of an MCP upstream: an effect whose
// call waits for the intent's end and answers with the upstream's stored
// result (internal/upstream, Tool).
type upstreamEffect interface {
	describedEffect
	effects.UpstreamTooler
	effects.NamespaceScoper
}

// visibleIn reports whether a tool limited to namespaces is listed for
// namespace.
func visibleIn(namespaces []string, namespace string) bool {
	return len(namespaces) == 0 || slices.Contains(namespaces, namespace)
}

// mirroredInputSchema is a recorded upstream tool's schema as listed: the
// upstream's (already without key_arg) plus the built-in tools'
// idempotency_key, new_action and require_approval. It stays raw JSON: an
// upstream's schema may be draft-07, which the effect validates by its own
// $schema.
func mirroredInputSchema(raw json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errors.New("input schema is not a JSON object")
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props = maps(props)
	for name, s := range map[string]*jsonschema.Schema{
		keyArgument: idempotencyKeyProperty, newActionArgument: newActionProperty, requireApprovalArgument: requireApprovalProperty,
	} {
		if _, ok := props[name]; ok {
			return nil, fmt.Errorf("the upstream's schema already has %s", name)
		}
		b, _ := json.Marshal(s)
		var v any
		_ = json.Unmarshal(b, &v)
		props[name] = v
	}
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	out["properties"] = props
	out["type"] = "object"
	return json.Marshal(out)
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+3)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// upstreamOutputSchema is a recorded upstream tool's output: the built-in
// tools' intent answer, plus upstream, never the upstream's own output
// schema (the answer is outbox's, whether or not the call has run).
func upstreamOutputSchema() *jsonschema.Schema {
	s := enqueueOutputSchema()
	s.Properties["upstream"] = &jsonschema.Schema{
		Types:       []string{"object", "null"},
		Description: "The upstream's stored answer ({content, structuredContent}) once the intent succeeded, else null.",
	}
	return s
}

// upstreamAnswer is a recorded upstream tool's structuredContent.
type upstreamAnswer struct {
	enqueueAnswer
	Upstream *storedUpstream `json:"upstream"`
}

// storedUpstream is the upstream's answer as the intent's result keeps it.
type storedUpstream struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
	Truncated         bool              `json:"truncated,omitempty"`
	Reconciled        bool              `json:"reconciled,omitempty"`
}

// unknownAdvice ends an unknown answer's first line.
const unknownAdvice = "do not retry: an operator decides"

// upstreamResult builds a recorded upstream tool's answer from what is
// stored, so a duplicate gets exactly what the first caller got: on
// succeeded the upstream's stored blocks and one JSON block of the answer;
// otherwise the answer's blocks, with isError for failed, unknown and
// cancelled.
func upstreamResult(a enqueueAnswer) (*mcp.CallToolResult, error) {
	ans := upstreamAnswer{enqueueAnswer: a}
	var blocks []mcp.Content
	if a.State == outbox.StateSucceeded && len(a.Result) > 0 {
		var stored storedUpstream
		if err := json.Unmarshal(a.Result, &stored); err == nil {
			ans.Upstream = &stored
			for _, raw := range stored.Content {
				var block struct {
					Type string `json:"type"`
					Text string `json:"text"`
				}
				_ = json.Unmarshal(raw, &block)
				if block.Type == "text" {
					blocks = append(blocks, &mcp.TextContent{Text: block.Text})
				} else {
					// Binary blocks are kept as their type, size and hash:
					// described, not replayed.
					blocks = append(blocks, &mcp.TextContent{Text: string(raw)})
				}
			}
		}
	}
	if ans.Upstream != nil {
		// The upstream's answer once: as upstream, not also as the
		// intent's result, which stores the same.
		intent := *a.Intent
		intent.Result = nil
		ans.Intent = &intent
	}
	b, err := json.Marshal(ans)
	if err != nil {
		return nil, fmt.Errorf("error encoding tool result: %w", err)
	}
	// The text blocks a model reads carry the upstream's answer as its
	// own blocks, and the intent's JSON without it: a 64 KB result is 64 KB
	// of the model's context, not three times that.
	text := b
	if ans.Upstream != nil {
		brief := ans
		brief.Upstream = nil
		if text, err = json.Marshal(brief); err != nil {
			return nil, fmt.Errorf("error encoding tool result: %w", err)
		}
	}
	res := &mcp.CallToolResult{StructuredContent: json.RawMessage(b)}
	switch a.State {
	case outbox.StateFailed, outbox.StateCancelled:
		res.IsError = true
		res.Content = append(res.Content, &mcp.TextContent{Text: fmt.Sprintf("%s: the action did not happen (%s)", a.State, errorCode(a.Intent))})
	case outbox.StateUnknown:
		res.IsError = true
		res.Content = append(res.Content, &mcp.TextContent{Text: "unknown: the upstream may or may not have acted; " + unknownAdvice})
	}
	res.Content = append(res.Content, blocks...)
	res.Content = append(res.Content, &mcp.TextContent{Text: string(text)})
	return res, nil
}

func errorCode(intent *outbox.Intent) string {
	if intent.Error != nil && intent.Error.Code != "" {
		return intent.Error.Code
	}
	return string(intent.State)
}

// awaitUpstream waits up to the tool's wait while the intent is pending or
// running; awaiting_approval and final states answer at once. A client
// that goes away ends the wait, never the intent.
func (s *server) awaitUpstream(ctx context.Context, tool *EffectTool, intent *outbox.Intent) *outbox.Intent {
	if tool.Wait <= 0 || (intent.State != outbox.StatePending && intent.State != outbox.StateRunning) {
		return intent
	}
	got, err := s.readIntent(ctx, intent.Key, tool.Wait)
	if err != nil || got == nil {
		return intent
	}
	return got
}

// withdrawn refuses a call of a recorded upstream tool that is withdrawn,
// with the withdrawal's code (upstream_drift, upstream_tool_missing).
func (s *server) withdrawn(tool *EffectTool) error {
	if tool.Upstream == "" {
		return nil
	}
	e, ok := s.client.Effects().Get(tool.Effect)
	if !ok {
		return nil
	}
	u, ok := e.(upstreamEffect)
	if !ok {
		return nil
	}
	if code := u.Withdrawn(); code != "" {
		return &outbox.Error{Code: code, Message: fmt.Sprintf("the upstream %s no longer lists tool %s as it was pinned; the tool takes no calls until an operator pins it again (outboxd effects pin)", u.UpstreamName(), u.UpstreamTool())}
	}
	return nil
}

// addPassthroughTools lists the pass-through tools visible in the
// server's namespace.
func (s *server) addPassthroughTools(srv *mcp.Server, tools []PassthroughTool, names map[string]bool) error {
	for _, p := range tools {
		if !visibleIn(p.Namespaces(), s.namespace) {
			continue
		}
		if names[p.Name()] || p.Name() == toolGetIntent || p.Name() == toolListIntents {
			return fmt.Errorf("mcpserver: tool %q defined twice", p.Name())
		}
		names[p.Name()] = true
		srv.AddTool(&mcp.Tool{
			Name:        p.Name(),
			Description: p.Description(),
			InputSchema: p.InputSchema(),
			Annotations: p.Annotations(),
		}, s.passthroughHandler(p))
	}
	return nil
}

// passthroughHandler forwards a call live, by any role that may read:
// never gated by approvals or rate limits, never stored; logged with its
// tool and outcome, never its arguments.
func (s *server) passthroughHandler(p PassthroughTool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := mayRead(req); err != nil {
			return s.errorResult(ctx, p.Name(), err), nil
		}
		res, err := p.Call(ctx, req.Params.Arguments)
		if err != nil {
			s.logger.InfoContext(ctx, "mcp pass-through call failed", "tool", p.Name(), "upstream", p.UpstreamName(), "outcome", "error")
			return s.errorResult(ctx, p.Name(), &outbox.Error{Code: codeUpstreamError, Message: err.Error()}), nil
		}
		s.logger.DebugContext(ctx, "mcp pass-through call", "tool", p.Name(), "upstream", p.UpstreamName(), "is_error", res.IsError)
		return res, nil
	}
}

// codeUpstreamError is a pass-through call the upstream did not answer.
const codeUpstreamError = "upstream_error"

// mayRead refuses a call whose token allows less than reading.
func mayRead(req *mcp.CallToolRequest) error {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil
	}
	if access.AllowNamed(req.Extra.TokenInfo.Scopes, access.ActionRead) {
		return nil
	}
	return &outbox.Error{Code: outbox.CodeForbidden, Field: "Authorization", Message: "this tool requires the role reader or above"}
}

// withdrawnFuncs are, by tool name, the MCP upstream tools' withdrawal
// states: a tool that drifted from its pin, or is gone, is not listed.
func withdrawnFuncs(tools []*EffectTool, passthrough []PassthroughTool, client *outbox.Client) map[string]func() string {
	funcs := map[string]func() string{}
	for _, t := range tools {
		if t == nil || t.Upstream == "" {
			continue
		}
		if e, ok := client.Effects().Get(t.Effect); ok {
			if u, ok := e.(upstreamEffect); ok {
				funcs[t.Name] = u.Withdrawn
			}
		}
	}
	for _, p := range passthrough {
		funcs[p.Name()] = p.Withdrawn
	}
	return funcs
}

// hideWithdrawn leaves withdrawn upstream tools out of tools/list: a host
// is not offered a tool whose upstream changed it under the same name
// until the operator pins it again (a call that comes anyway waits, or
// fails, as its tool says).
func hideWithdrawn(withdrawn map[string]func() string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		if len(withdrawn) == 0 {
			return next
		}
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if method != "tools/list" || err != nil {
				return res, err
			}
			if list, ok := res.(*mcp.ListToolsResult); ok {
				list.Tools = slices.DeleteFunc(slices.Clone(list.Tools), func(t *mcp.Tool) bool {
					f, ok := withdrawn[t.Name]
					return ok && f() != ""
				})
			}
			return res, nil
		}
	}
}

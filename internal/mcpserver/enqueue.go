package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/outbox"
)

// enqueueAnswer is a mutating tool's answer: the intent and whether this
// call was a duplicate, like the HTTP API's enqueue answer.
type enqueueAnswer struct {
	*outbox.Intent
	Duplicate bool `json:"duplicate"`
	// PossibleDuplicateOf is set when the model-key guard (mode replay)
	// answered a fresh key with the intent of an identical earlier call:
	// that call's key.
	PossibleDuplicateOf string `json:"possible_duplicate_of,omitempty"`
	// NextStep tells the model what to do about an intent that waits for a
	// person.
	NextStep string `json:"next_step,omitempty"`
}

// intentAnswer is get_intent's answer: the intent, and what to do next
// when it waits for a person.
type intentAnswer struct {
	*outbox.Intent
	NextStep string `json:"next_step,omitempty"`
}

// awaitingApprovalStep is NextStep for an intent awaiting approval: the
// model must neither retry nor route around the brake.
const awaitingApprovalStep = "waiting for a person to approve; do not retry under another key. Tell the user it awaits approval, and call get_intent with wait_seconds to learn the decision."

// nextStep returns the NextStep of intent.
func nextStep(intent *outbox.Intent) string {
	if intent != nil && intent.State == outbox.StateAwaitingApproval {
		return awaitingApprovalStep
	}
	return ""
}

// effectToolHandler returns the handler of a mutating tool: check the call,
// then enqueue it under its explicit key or the automatic one.
func (s *server) effectToolHandler(tool *EffectTool, schema *jsonschema.Resolved) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := mayMutate(req); err != nil {
			return s.errorResult(ctx, tool.Name, err), nil
		}
		if err := s.rateLimit(req); err != nil {
			return s.errorResult(ctx, tool.Name, err), nil
		}
		call, err := splitArguments(req.Params.Arguments)
		if err != nil {
			return s.errorResult(ctx, tool.Name, err), nil
		}
		if call.keyGiven {
			if err := outbox.ValidateKey(call.key); err != nil {
				return s.errorResult(ctx, tool.Name, renameField(err, keyArgument)), nil
			}
		}
		if schema != nil {
			if err := validateSchema(schema, call.arguments); err != nil {
				return s.errorResult(ctx, tool.Name, err), nil
			}
		}
		if tool.ValidateFunc != nil {
			var args map[string]any
			if err := json.Unmarshal(call.args, &args); err != nil {
				return s.errorResult(ctx, tool.Name, invalidArguments(err)), nil
			}
			if err := tool.ValidateFunc(args); err != nil {
				return s.errorResult(ctx, tool.Name, err), nil
			}
		}

		// A withdrawn upstream tool (drifted from its pin, or gone) is not
		// listed: a call that comes anyway is refused before anything is
		// recorded, as its absence from tools/list promises, rather than
		// recording an intent that waits until the operator pins again.
		if err := s.withdrawn(tool); err != nil {
			return s.errorResult(ctx, tool.Name, err), nil
		}

		// A retried call answering an approval asked of the host is
		// checked against its requestState before anything is written.
		state, answerGiven, err := s.checkRequestState(ctx, req, tool, call)
		if err != nil {
			return s.errorResult(ctx, tool.Name, err), nil
		}

		// A key in a tool call comes from the model: it is guarded.
		// Without one, the call gets its automatic key.
		res, err := s.guard.Enqueue(ctx, &keyguard.Params{
			Args:        json.RawMessage(call.args),
			Effect:      tool.Effect,
			EnqueuedBy:  s.actor(req),
			Key:         call.key,
			ModelKey:    call.keyGiven,
			Namespace:   s.namespace,
			NewAction:   call.newAction,
			RequestedBy: requestedBy(req),
			Tool:        tool.Name,

			RequireApproval: call.requireApproval,
		})
		if err != nil {
			return s.errorResult(ctx, tool.Name, err), nil
		}
		s.logger.DebugContext(ctx, "mcp tool call recorded",
			"tool", tool.Name, "intent_id", res.Intent.ID, "duplicate", res.Duplicate,
			"key_source", string(res.Intent.KeySource), "state", string(res.Intent.State))
		intent := res.Intent
		if call.requireApprovalHost && !res.Duplicate && intent.State == outbox.StateAwaitingApproval &&
			intent.ApprovalRule != nil && *intent.ApprovalRule == outbox.ApprovalRequested {
			// The caller asked for an approval the host may give. A
			// statement of its own after the enqueue's commit: should it
			// fail, the intent is decided by operators only, the safe side.
			if intent, err = s.requestedHost(ctx, intent); err != nil {
				return s.errorResult(ctx, tool.Name, err), nil
			}
		}
		if state != nil {
			if intent.ID != state.Intent {
				return s.errorResult(ctx, tool.Name, stateRefused("was issued for another intent")), nil
			}
			if intent, err = s.applyDecision(ctx, state, intent, *answerGiven, clientName(req.Session)); err != nil {
				return s.errorResult(ctx, tool.Name, err), nil
			}
		}
		answer := enqueueAnswer{Intent: intent, Duplicate: res.Duplicate, PossibleDuplicateOf: res.PossibleDuplicateOf,
			NextStep: nextStep(intent)}
		if declaresTasks(toolCaps(req)) {
			return s.taskCall(ctx, req, tool, answer)
		}
		if answerGiven != nil {
			// This call answered the host's approval request: whatever
			// the answer (a decline leaves the intent awaiting), it is
			// not asked again in the same call, so that a client that
			// retries input requests by itself does not loop.
		} else if ask, err := s.askHost(ctx, req, tool, intent); err != nil {
			return s.errorResult(ctx, tool.Name, err), nil
		} else if ask != nil {
			return ask, nil
		}
		if tool.Upstream != "" {
			// Duplicates wait too: every answer is built from what is
			// stored, so each caller gets what the first one got.
			answer.Intent = s.awaitUpstream(ctx, tool, res.Intent)
			answer.NextStep = nextStep(answer.Intent)
			return upstreamResult(answer)
		}
		return jsonResult(answer)
	}
}

// mayMutate refuses a mutating call whose token (over HTTP, its TokenInfo,
// whose one scope is the token's role) may not enqueue.
// Over stdio there is no token: the local user acts.
func mayMutate(req *mcp.CallToolRequest) error {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil
	}
	if access.AllowNamed(req.Extra.TokenInfo.Scopes, access.ActionEnqueue) {
		return nil
	}
	return &outbox.Error{Code: outbox.CodeForbidden, Field: "Authorization",
		Message: fmt.Sprintf("this tool requires the role %s or above; the token's role is %s", access.ActionEnqueue.Role(), strings.Join(req.Extra.TokenInfo.Scopes, ", "))}
}

// actor names who makes a call, for the intent's enqueued_by: over HTTP
// with tokens, access.APIActor of the token's name (its TokenInfo's
// UserID); otherwise Config.Actor, who serves.
func (s *server) actor(req *mcp.CallToolRequest) string {
	if req != nil && req.Extra != nil && req.Extra.TokenInfo != nil {
		return access.APIActor(req.Extra.TokenInfo.UserID)
	}
	return s.actorDefault
}

// rateLimit spends one call of the caller's rate (RateLimitFunc), or refuses
// the call, saying how long to wait.
func (s *server) rateLimit(req *mcp.CallToolRequest) error {
	if s.rateLimitFunc == nil {
		return nil
	}
	name := ""
	if req != nil && req.Extra != nil && req.Extra.TokenInfo != nil {
		name = req.Extra.TokenInfo.UserID
	}
	wait, ok := s.rateLimitFunc(name)
	if ok {
		return nil
	}
	return &outbox.Error{Code: outbox.CodeRateLimited,
		Message: fmt.Sprintf("this token's calls are beyond the server's rate limit; retry after %d s", max(1, int(math.Ceil(wait.Seconds()))))}
}

// requestedBy names who asked, for the intent's requested_by: "mcp", and the
// client's name when it gave one ("mcp:claude-code"): from the request's
// own _meta (protocol 2026-07-28, which every request of a stateless
// /mcp carries), else from the MCP handshake. An older client's request
// to the stateless /mcp carries neither.
func requestedBy(req *mcp.CallToolRequest) string {
	if req == nil || req.Params == nil {
		return "mcp"
	}
	info := req.ClientInfo()
	if info == nil || info.Name == "" {
		return "mcp"
	}
	return sanitizeClientName(info.Name)
}

// sanitizeClientName is "mcp:" and a client's name as it may be recorded
// and shown to operators: at most 200 bytes of valid UTF-8 without control
// characters (requested_by holds at most 255).
func sanitizeClientName(name string) string {
	if len(name) > 200 {
		name = name[:200]
	}
	name = strings.ToValidUTF8(name, "")
	return "mcp:" + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, name)
}

// requestedHost lets the person at the host decide intent, which its
// caller's own request holds, and returns it as it then stands.
func (s *server) requestedHost(ctx context.Context, intent *outbox.Intent) (*outbox.Intent, error) {
	if _, err := s.queries.SetRequestedHost(ctx, s.pool, intent.ID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("error recording the host's approval: %w", err)
	}
	return s.client.Get(ctx, s.namespace, intent.Key)
}

// toolCall is a mutating tool's arguments, split into the effect's
// arguments and the idempotency key.
type toolCall struct {
	// arguments is the call's whole arguments object, for the schema.
	arguments []byte
	// args is the arguments without idempotency_key: the effect's.
	args []byte
	// key is the idempotency key, when keyGiven.
	key      string
	keyGiven bool
	// newAction is the model's confirmation that an identical call made
	// moments before under another key was another action.
	newAction bool
	// requireApproval asks for a person's approval first.
	requireApproval bool
	// requireApprovalHost lets that person be the one at the MCP host
	// (require_approval "host").
	requireApprovalHost bool
}

// splitArguments takes idempotency_key out of a tool call's arguments,
// keeping every other member as it was sent (the same bytes, so numbers keep
// their spelling, in the same order). Arguments must be a JSON object without
// duplicate names: a duplicate would leave it to the parser which value
// counts.
func splitArguments(raw json.RawMessage) (*toolCall, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		trimmed = []byte("{}")
	}
	if depth := nesting(trimmed); depth > depthMax {
		return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "arguments",
			Message: fmt.Sprintf("nested deeper than %d levels", depthMax)}
	}
	call := &toolCall{arguments: trimmed}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "arguments", Message: "must be a JSON object"}
	}
	var args bytes.Buffer
	args.WriteByte('{')
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalidArguments(err)
		}
		name, _ := tok.(string) // object keys are always strings
		if seen[name] {
			return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: name, Message: "is given more than once"}
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, invalidArguments(err)
		}
		if name == keyArgument {
			if err := json.Unmarshal(value, &call.key); err != nil {
				return nil, &outbox.Error{Code: outbox.CodeInvalidKey, Field: keyArgument, Message: "must be a string"}
			}
			call.keyGiven = true
			continue
		}
		if name == newActionArgument {
			if err := json.Unmarshal(value, &call.newAction); err != nil {
				return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: newActionArgument, Message: "must be true or false"}
			}
			continue
		}
		if name == requireApprovalArgument {
			var host string
			if json.Unmarshal(value, &host) == nil && host == ViaHost {
				call.requireApproval, call.requireApprovalHost = true, true
				continue
			}
			if err := json.Unmarshal(value, &call.requireApproval); err != nil {
				return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: requireApprovalArgument, Message: `must be true, false or "host"`}
			}
			continue
		}
		if args.Len() > 1 {
			args.WriteByte(',')
		}
		quoted, _ := json.Marshal(name) // a string always marshals
		args.Write(quoted)
		args.WriteByte(':')
		args.Write(value)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, invalidArguments(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "arguments", Message: "must be a single JSON object"}
	}
	args.WriteByte('}')
	call.args = args.Bytes()
	return call, nil
}

// depthMax is the deepest nesting of arrays and objects accepted in a
// call's arguments, as the HTTP API's request bodies: effects' arguments are
// flat records, and parsers down the line recurse.
const depthMax = 64

// nesting returns the deepest nesting of arrays and objects in b, a JSON
// text, counting brackets outside strings.
func nesting(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

func invalidArguments(err error) error {
	return &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "arguments", Message: "invalid JSON: " + err.Error()}
}

// validateSchema checks a call's arguments against the tool's schema.
func validateSchema(schema *jsonschema.Resolved, arguments []byte) error {
	var instance any
	if err := json.Unmarshal(arguments, &instance); err != nil {
		return invalidArguments(err)
	}
	if err := schema.Validate(instance); err != nil {
		// "validating root: validating /properties/amount: minimum: ..."
		// names the argument at fault: say it as the field.
		field, msg := "arguments", strings.TrimPrefix(err.Error(), "validating root: ")
		if m := propertyErrorRE.FindStringSubmatch(msg); m != nil {
			field, msg = m[1], m[2]
		}
		return &outbox.Error{Code: outbox.CodeInvalidArgs, Field: field, Message: msg}
	}
	return nil
}

// propertyErrorRE matches a schema error about one top-level property.
var propertyErrorRE = regexp.MustCompile(`(?s)^validating /properties/([^/:]+): (.*)$`)

// renameField returns err with its Field set to field, when it is an
// *outbox.Error: ValidateKey names the field "key", the tool argument is
// idempotency_key.
func renameField(err error, field string) error {
	var oe *outbox.Error
	if errors.As(err, &oe) {
		return &outbox.Error{Code: oe.Code, Field: field, Message: oe.Message}
	}
	return err
}

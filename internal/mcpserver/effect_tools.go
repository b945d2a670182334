package mcpserver

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/outbox"
)

// EffectTool is a mutating MCP tool: a call records an intent of Effect,
// whose arguments are the call's arguments without idempotency_key.
type EffectTool struct {
	// Description tells the model what the tool does. Required.
	Description string

	// Effect is the effect the tool enqueues. A call answers unknown_effect
	// while the effect is not enabled. Required.
	Effect string

	// InputSchema describes the effect's arguments: a JSON Schema of type
	// object. The server adds the optional idempotency_key property and
	// checks every call against the schema before the effect validates the
	// arguments too. Required.
	InputSchema *jsonschema.Schema

	// Name is the tool's name. Required.
	Name string

	// RawInputSchema, when set, replaces InputSchema: a recorded MCP
	// upstream tool's schema, listed as it is (it may be draft-07) and
	// validated by the effect. Defaults to none.
	RawInputSchema json.RawMessage

	// Title is a short human-readable name. Defaults to none.
	Title string

	// Annotations, when set, replace the mutating tools' annotations: a
	// recorded MCP upstream tool's, the upstream's hints with outbox's
	// guarantee. Defaults to none.
	Annotations *mcp.ToolAnnotations

	// Upstream names the MCP upstream of a recorded upstream tool, whose
	// answers carry the upstream's stored result. Defaults to none.
	Upstream string

	// Namespaces, when set, are the only namespaces the tool is listed
	// in. Defaults to all.
	Namespaces []string

	// Wait is how long a call waits for its intent's end before it
	// answers (a recorded upstream tool's wait). Defaults to zero: the
	// answer comes at once.
	Wait time.Duration

	// ValidateFunc, when set, checks a call's arguments (without
	// idempotency_key and new_action) after the schema did, for rules a
	// schema would need a top-level combinator for, which some hosts
	// refuse. It returns an *outbox.Error naming the field. Defaults to
	// none.
	ValidateFunc func(args map[string]any) error
}

// describedEffect is an effect that describes its own tool: a declared
// HTTP effect (effects/declared), whose file holds the tool's name, its
// description and the args' JSON Schema.
type describedEffect interface {
	effects.ToolNamer
	effects.Describer
	effects.ArgsSchemaer
}

// ToolsFor returns EffectTools() and a tool for each effect of registry that
// describes its own (a declared effect): the same kind of tool, with the
// same annotations, key policy and answers as the built-ins'.
func ToolsFor(registry *effects.Registry) ([]*EffectTool, error) {
	tools := EffectTools()
	for _, name := range registry.Names() {
		e, _ := registry.Get(name)
		if u, ok := e.(upstreamEffect); ok {
			raw, err := mirroredInputSchema(u.ArgsSchema())
			if err != nil {
				return nil, fmt.Errorf("mcpserver: tool %s: %w", u.Tool(), err)
			}
			title, annotations := upstreamAnnotations(e)
			tools = append(tools, &EffectTool{
				Title:          title,
				Annotations:    annotations,
				Name:           u.Tool(),
				Effect:         name,
				Description:    u.Description() + "\n\n" + upstreamCallAdvice(u.Wait()) + keyAdvice,
				RawInputSchema: raw,
				Upstream:       u.UpstreamName(),
				Wait:           u.Wait(),
				Namespaces:     u.Namespaces(),
			})
			continue
		}
		d, ok := e.(describedEffect)
		if !ok {
			continue
		}
		var schema jsonschema.Schema
		if err := json.Unmarshal(d.ArgsSchema(), &schema); err != nil {
			return nil, fmt.Errorf("mcpserver: effect %s: its args schema is not one the MCP SDK reads: %w", name, err)
		}
		tools = append(tools, &EffectTool{
			Name:        d.Tool(),
			Effect:      name,
			Description: d.Description() + "\n\nThe action is recorded as an intent and carried out by a worker: the answer comes at once, usually in state \"pending\". Call get_intent with wait_seconds to learn the outcome." + keyAdvice,
			InputSchema: &schema,
		})
	}
	return tools, nil
}

// upstreamAnnotated is a recorded upstream tool that keeps what its
// upstream said of it: its title and hints (internal/upstream, Tool).
type upstreamAnnotated interface {
	Title() string
	UpstreamAnnotations() *mcp.ToolAnnotations
}

// upstreamAnnotations are a recorded upstream tool's title and
// annotations: the upstream's title and its destructive and open-world
// hints (what the tool does is the upstream's to say), and outbox's
// guarantee, idempotent (a repeated call with the same key has no further
// effect: it answers the first call's intent), whatever the upstream said.
func upstreamAnnotations(e effects.Effect) (string, *mcp.ToolAnnotations) {
	ann := &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(true)}
	a, ok := e.(upstreamAnnotated)
	if !ok {
		return "", ann
	}
	ann.Title = a.Title()
	if up := a.UpstreamAnnotations(); up != nil {
		if up.DestructiveHint != nil {
			ann.DestructiveHint = ptr(*up.DestructiveHint)
		}
		if up.OpenWorldHint != nil {
			ann.OpenWorldHint = ptr(*up.OpenWorldHint)
		}
	}
	return ann.Title, ann
}

// upstreamCallAdvice tells the model how a recorded upstream tool's call
// answers: after the intent's end when it comes within wait, else pending.
func upstreamCallAdvice(wait time.Duration) string {
	if wait <= 0 {
		return "The call is recorded as an intent and made once by a worker, however often it is repeated; the answer comes at once, in state \"pending\" (call get_intent with wait_seconds to learn the outcome)."
	}
	return fmt.Sprintf("The call is recorded as an intent and made once by a worker, however often it is repeated; the answer waits up to %s for the outcome, else comes in state \"pending\" (call get_intent with wait_seconds to learn it).", wait)
}

// requireOneOf is a ValidateFunc requiring at least one of the fields.
func requireOneOf(fields ...string) func(map[string]any) error {
	return func(args map[string]any) error {
		for _, f := range fields {
			if _, ok := args[f]; ok {
				return nil
			}
		}
		return &outbox.Error{Code: outbox.CodeInvalidArgs, Field: fields[0],
			Message: fmt.Sprintf("at least one of %s is required", strings.Join(fields, " and "))}
	}
}

// EffectTools returns the effect tools of docs/agents.md: charge_card, send_email,
// create_ticket and call_webhook, for the effects charge, email, ticket and
// webhook, with the arguments of each effect (README, "Effects"). Each call returns
// fresh values, which the caller may change (to point a tool at another
// effect, for instance).
func EffectTools() []*EffectTool {
	return []*EffectTool{
		{
			Name:   "charge_card",
			Title:  "Charge a card",
			Effect: charge.Name,
			Description: `Charges a customer's card (Stripe PaymentIntent, confirmed at once), exactly once per idempotency key.

The charge is recorded as an intent and carried out by a worker: the answer comes at once, usually in state "pending". Call get_intent with wait_seconds to learn the outcome ("succeeded" with the provider's result, or "failed" with an error).` + keyAdvice,
			InputSchema: argsSchema(charge.ArgsSchema()),
		},
		{
			Name:   "send_email",
			Title:  "Send an email",
			Effect: email.Name,
			Description: `Sends one email, at most once per idempotency key.

The email is recorded as an intent and sent by a worker: the answer comes at once, usually in state "pending". Call get_intent with wait_seconds to learn the outcome. Plain SMTP cannot tell whether a message whose answer was lost arrived: such an email ends "unknown" and is never sent again unless an operator decides so.` + keyAdvice,
			InputSchema: argsSchema(email.ArgsSchema()),
			// Not an anyOf in the schema: hosts such as Anthropic's API
			// refuse a tool whose input schema has a combinator at the top
			// level, and then every tool of the server is lost.
			ValidateFunc: requireOneOf("text", "html"),
		},
		{
			Name:   "create_ticket",
			Title:  "Create a support ticket",
			Effect: ticket.Name,
			Description: `Creates one Zendesk support ticket per idempotency key.

The ticket is recorded as an intent and created by a worker: the answer comes at once, usually in state "pending". Call get_intent with wait_seconds to learn the outcome; on success the result holds the ticket.` + keyAdvice,
			InputSchema: argsSchema(ticket.ArgsSchema()),
		},
		{
			Name:   "call_webhook",
			Title:  "Call a webhook",
			Effect: webhook.Name,
			Description: `Posts a signed JSON payload to a webhook endpoint that the operator configured by name, once per idempotency key. No URL can be given: only the configured names are accepted.

The call is recorded as an intent and made by a worker: the answer comes at once, usually in state "pending". Call get_intent with wait_seconds to learn the outcome.` + keyAdvice,
			InputSchema: argsSchema(webhook.ArgsSchema()),
		},
	}
}

// argsSchema reads a built-in effect's JSON Schema of its arguments.
func argsSchema(raw json.RawMessage) *jsonschema.Schema {
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		panic(fmt.Sprintf("mcpserver: a built-in effect's args schema is not one the MCP SDK reads: %v", err))
	}
	return &s
}

// keyAdvice ends every mutating tool's description: models read it.
const keyAdvice = `

Pass idempotency_key: one key per logical action, the same key on every retry of that action (a timeout, an error, a repeated request), and a new key for a new action. Without a key, identical calls within the server's automatic key window count as one action (the answer then says key_source "auto"), and two genuinely distinct identical actions inside that window collapse into one. An answer with duplicate true means the action was already recorded: it was not performed again, and the answer is its current state. If a call with a new key is refused with possible_duplicate, the same action was recorded moments ago under another key: to retry it, call again with that earlier key (or get_intent it); only if the user really wants a second, identical action, call again with new_action true.`

// idempotencyKeyProperty is the optional idempotency_key added to every
// mutating tool's schema.
var idempotencyKeyProperty = &jsonschema.Schema{
	Type:        "string",
	MinLength:   ptr(1),
	MaxLength:   ptr(outbox.KeyMaxLength),
	Pattern:     "^[!-~]+$",
	Description: "The idempotency key naming this logical action: 1 to 255 printable ASCII characters without spaces. Reuse it on every retry of the action. Defaults to an automatic key derived from the tool and its arguments.",
}

// newActionProperty is the optional new_action added to every mutating
// tool's schema.
var newActionProperty = &jsonschema.Schema{
	Type:        "boolean",
	Description: "Set to true only when the user really wants a second action identical to one recorded moments ago under another key (after a possible_duplicate answer). Defaults to false.",
}

var requireApprovalProperty = &jsonschema.Schema{
	Types:       []string{"boolean", "string"},
	Enum:        []any{true, false, ViaHost},
	Description: `Set to true to have a person approve this action before it runs (the answer's state is then awaiting_approval); "host" lets the user in front of this client approve it too. Some actions need approval whatever this says. Defaults to false.`,
}

// inputSchema returns the tool's schema with idempotency_key, new_action
// and require_approval added.
func (t *EffectTool) inputSchema() (*jsonschema.Schema, error) {
	if t.InputSchema == nil || t.InputSchema.Type != "object" {
		return nil, fmt.Errorf("mcpserver: tool %q: input schema must be of type object", t.Name)
	}
	s := t.InputSchema.CloneSchemas()
	props := make(map[string]*jsonschema.Schema, len(s.Properties)+1)
	for name, p := range s.Properties {
		props[name] = p
	}
	for _, name := range []string{keyArgument, newActionArgument, requireApprovalArgument} {
		if _, ok := props[name]; ok {
			return nil, fmt.Errorf("mcpserver: tool %q: the effect's arguments must not include %s", t.Name, name)
		}
	}
	props[keyArgument] = idempotencyKeyProperty
	props[newActionArgument] = newActionProperty
	props[requireApprovalArgument] = requireApprovalProperty
	s.Properties = props
	return s, nil
}

func object(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:                 "object",
		Properties:           props,
		Required:             required,
		AdditionalProperties: falseSchema(),
	}
}

// falseSchema is the schema that nothing matches: additionalProperties:
// false.
func falseSchema() *jsonschema.Schema { return &jsonschema.Schema{Not: &jsonschema.Schema{}} }

func ptr[T any](v T) *T { return &v }

// ReadToolNames are the names of the read-only tools every server lists,
// which no effect tool may take.
func ReadToolNames() []string { return []string{toolGetIntent, toolListIntents} }

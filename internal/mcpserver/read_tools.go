package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/outbox"
)

// The read-only tools' names.
const (
	toolGetIntent   = "get_intent"
	toolListIntents = "list_intents"
)

// getIntentInput is get_intent's arguments.
type getIntentInput struct {
	Key         string  `json:"key"`
	WaitSeconds float64 `json:"wait_seconds"`
}

// listIntentsInput is list_intents' arguments.
type listIntentsInput struct {
	Cursor string         `json:"cursor"`
	Effect string         `json:"effect"`
	Limit  int            `json:"limit"`
	States []outbox.State `json:"states"`
}

// listAnswer is list_intents' answer, as the HTTP API's listing.
type listAnswer struct {
	Intents    []*outbox.Intent `json:"intents"`
	NextCursor *string          `json:"next_cursor"`
}

var (
	getIntentSchema = object(map[string]*jsonschema.Schema{
		"key": {
			Type: "string", MinLength: ptr(1), MaxLength: ptr(outbox.KeyMaxLength), Pattern: "^[!-~]+$",
			Description: "The intent's idempotency key, as given to the mutating tool or as its answer showed it (automatic keys start with auto:).",
		},
		"wait_seconds": {
			Type: "number", Minimum: ptr(0.0), Maximum: ptr(apierror.WaitMax.Seconds()),
			Description: "Wait up to this many seconds (at most 60) for the intent to reach a final state (succeeded, failed, unknown or cancelled), and answer as soon as it does. Defaults to 0: answer at once.",
		},
	}, "key")

	listIntentsSchema = object(map[string]*jsonschema.Schema{
		"states": {
			Type: "array",
			Items: &jsonschema.Schema{Type: "string", Enum: []any{
				string(outbox.StatePending), string(outbox.StateRunning), string(outbox.StateSucceeded),
				string(outbox.StateFailed), string(outbox.StateUnknown), string(outbox.StateCancelled),
			}},
			Description: "Keep only intents in these states. Defaults to all.",
		},
		"effect": {Type: "string", Description: "Keep only intents of this effect (charge, email, ticket, webhook). Defaults to all."},
		"limit": {
			Type: "integer", Minimum: ptr(1.0), Maximum: ptr(float64(outbox.ListLimitMax)),
			Description: "The page size, at most 1000. Defaults to 20.",
		},
		"cursor": {Type: "string", Description: "The next_cursor of the previous page, to continue a listing."},
	})
)

// addReadTools adds get_intent and list_intents.
func (s *server) addReadTools(srv *mcp.Server) error {
	getSchema, err := resolveSchema(getIntentSchema)
	if err != nil {
		return err
	}
	listSchema, err := resolveSchema(listIntentsSchema)
	if err != nil {
		return err
	}
	readOnly := func(title string) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false), Title: title}
	}
	srv.AddTool(&mcp.Tool{
		Name:  toolGetIntent,
		Title: "Get an intent",
		Description: `Reads an intent by its idempotency key: its state (awaiting_approval, pending, running, succeeded, failed, unknown, cancelled), the provider's result once succeeded, the error once failed. With wait_seconds, waits until the intent reaches a final state or the time is up, and answers as soon as it does; an intent awaiting approval answers when a person has decided (approved: pending; denied or expired: cancelled).

"unknown" means the provider could not confirm whether the effect happened: do not retry it; an operator decides. "awaiting_approval" means a person must approve it first: do not retry it under another key.`,
		InputSchema:  getIntentSchema,
		OutputSchema: intentOutputSchema(),
		Annotations:  readOnly("Get an intent"),
	}, s.getIntent(getSchema))
	srv.AddTool(&mcp.Tool{
		Name:         toolListIntents,
		Title:        "List intents",
		Description:  `Lists intents, newest first, a page at a time, optionally only some states or one effect. The answer's next_cursor, when not null, continues the listing.`,
		InputSchema:  listIntentsSchema,
		OutputSchema: listOutputSchema(),
		Annotations:  readOnly("List intents"),
	}, s.listIntents(listSchema))
	return nil
}

func (s *server) getIntent(schema *jsonschema.Resolved) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in getIntentInput
		if err := decodeInput(schema, req.Params.Arguments, &in); err != nil {
			return s.errorResult(ctx, toolGetIntent, err), nil
		}
		intent, err := s.readIntent(ctx, in.Key, time.Duration(in.WaitSeconds*float64(time.Second)))
		if err != nil {
			return s.errorResult(ctx, toolGetIntent, err), nil
		}
		return jsonResult(intentAnswer{Intent: intent, NextStep: nextStep(intent)})
	}
}

// readIntent reads the intent, first waiting up to wait for it to be
// terminal. A wait that ends first answers the intent as it stands.
func (s *server) readIntent(ctx context.Context, key string, wait time.Duration) (*outbox.Intent, error) {
	if wait <= 0 {
		return s.client.Get(ctx, s.namespace, key)
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	intent, err := s.waitFunc(waitCtx, s.namespace, key)
	if err == nil || ctx.Err() != nil || waitCtx.Err() == nil {
		return intent, err
	}
	// The wait ended, not the call: answer the intent as it stands now.
	// What the wait last read may be older (a claim, an attempt wakes no
	// wait).
	return s.client.Get(ctx, s.namespace, key)
}

func (s *server) listIntents(schema *jsonschema.Resolved) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in listIntentsInput
		if err := decodeInput(schema, req.Params.Arguments, &in); err != nil {
			return s.errorResult(ctx, toolListIntents, err), nil
		}
		if in.Limit == 0 {
			in.Limit = ListLimitDefault
		}
		res, err := s.client.List(ctx, &outbox.ListParams{
			Cursor:    in.Cursor,
			Effect:    in.Effect,
			Limit:     in.Limit,
			Namespace: s.namespace,
			States:    in.States,
		})
		if err != nil {
			return s.errorResult(ctx, toolListIntents, err), nil
		}
		answer := listAnswer{Intents: res.Intents}
		if res.NextCursor != "" {
			answer.NextCursor = &res.NextCursor
		}
		return jsonResult(answer)
	}
}

// decodeInput checks a read tool's arguments against its schema and decodes
// them into v.
func decodeInput(schema *jsonschema.Resolved, raw json.RawMessage, v any) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		trimmed = []byte("{}")
	}
	if err := validateSchema(schema, trimmed); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidArguments(err)
	}
	return nil
}

package mcpserver

import (
	"github.com/google/jsonschema-go/jsonschema"

	"github.com/outbox-dev/outbox/outbox"
)

// Output schemas describe each tool's structuredContent, so that hosts and
// SDKs can check and use it (MCP's outputSchema). They follow the intent's
// JSON (package outbox, Intent) and the HTTP API's answers.

// intentProperties are the intent's JSON fields.
func intentProperties() map[string]*jsonschema.Schema {
	nullable := func(t string) *jsonschema.Schema { return &jsonschema.Schema{Types: []string{t, "null"}} }
	return map[string]*jsonschema.Schema{
		"id":           {Type: "integer", Description: "The intent's id; every call with its key answers with the same."},
		"namespace":    {Type: "string"},
		"key":          {Type: "string", Description: "The idempotency key."},
		"effect":       {Type: "string"},
		"args":         {Type: "object", Description: "The effect's arguments."},
		"args_sha256":  {Type: "string", Description: "SHA-256 of args in canonical form: what a person's approval names."},
		"state":        {Type: "string", Enum: stateEnum()},
		"next_step":    {Type: "string", Description: "What to do next, when the intent waits for a person."},
		"attempts":     {Type: "integer"},
		"result":       {Description: "The provider's answer once succeeded, else null."},
		"error":        {Types: []string{"object", "null"}, Description: "{code, message} of a failed attempt or intent, else null."},
		"provider_key": {Type: "string", Description: "The key sent to the provider, derived from the intent; never the idempotency key."},
		"requested_by": nullable("string"),
		"enqueued_by":  {Type: "string", Description: "Who enqueued the intent, from the credentials (api:<token fingerprint>, cli:<user>)."},
		"key_source":   {Type: "string", Enum: []any{"explicit", "auto", "model_confirmed"}},
		"created_at":   {Type: "string", Format: "date-time"},
		"updated_at":   {Type: "string", Format: "date-time"},
		"completed_at": {Types: []string{"string", "null"}, Description: "When the intent became final, else null."},
		"job_id":       {Types: []string{"integer", "null"}, Description: "The River job that runs the intent's attempts, or ran its last (a batch of first attempts, or the intent's own job), for an operator's River UI; null until dispatched."},
		"job_kind":     {Type: "string", Enum: []any{"outbox_intent", "outbox_intent_batch"}, Description: "job_id's River kind: outbox_intent_batch for a batch of first attempts; absent when unknown."},
	}
}

// stateEnum is every state, as a JSON Schema enum.
func stateEnum() []any {
	var out []any
	for _, s := range outbox.States() {
		out = append(out, string(s))
	}
	return out
}

var intentRequired = []string{"id", "namespace", "key", "effect", "args", "state", "attempts", "provider_key", "key_source", "created_at", "updated_at"}

// intentOutputSchema is get_intent's output.
func intentOutputSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Properties: intentProperties(), Required: intentRequired}
}

// enqueueOutputSchema is a mutating tool's output: the intent, "duplicate",
// and "possible_duplicate_of" when the model-key guard replayed an earlier
// intent.
func enqueueOutputSchema() *jsonschema.Schema {
	props := intentProperties()
	props["duplicate"] = &jsonschema.Schema{Type: "boolean", Description: "True when the action was already recorded: it was not performed again."}
	props["possible_duplicate_of"] = &jsonschema.Schema{Type: "string", Description: "The earlier key whose intent answers this call (model-key guard, mode replay)."}
	return &jsonschema.Schema{Type: "object", Properties: props, Required: append(append([]string{}, intentRequired...), "duplicate")}
}

// listOutputSchema is list_intents' output.
func listOutputSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type: "object",
		Properties: map[string]*jsonschema.Schema{
			"intents":     {Type: "array", Items: intentOutputSchema()},
			"next_cursor": {Types: []string{"string", "null"}, Description: "Continues the listing; null on the last page."},
		},
		Required: []string{"intents", "next_cursor"},
	}
}

package effects_test

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/effects/webhook"
)

var (
	_ effects.ArgsSchemaer = (*charge.Effect)(nil)
	_ effects.ArgsSchemaer = (*email.Effect)(nil)
	_ effects.ArgsSchemaer = (*ticket.Effect)(nil)
	_ effects.ArgsSchemaer = (*webhook.Effect)(nil)
	_ effects.ArgsSchemaer = (*declared.Effect)(nil)
)

// TestArgsSchema holds each built-in effect's JSON Schema to its Go
// validation, through the validator the MCP server checks calls with: on
// every sample both accept or both refuse, except where a rule is the Go
// validation's alone (goOnly), and the schema never refuses what the Go
// validation accepts.
func TestArgsSchema(t *testing.T) {
	t.Parallel()

	hook, err := webhook.New(&webhook.Config{
		Endpoints: []webhook.Endpoint{{Name: "orders", URL: "https://example.com/hook"}},
		Secret:    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	})
	require.NoError(t, err)

	type sample struct {
		args string
		ok   bool // the Go validation accepts it
		// goOnly marks a sample the Go validation refuses by a rule the
		// schema does not say, which the schema therefore accepts.
		goOnly bool
	}
	for name, tc := range map[string]struct {
		schema   json.RawMessage
		validate func(json.RawMessage) error
		samples  []sample
	}{
		charge.Name: {charge.ArgsSchema(), func(a json.RawMessage) error { _, err := charge.ParseArgs(a); return err }, []sample{
			{args: `{"customer": "cus_1", "amount": 1999, "currency": "eur"}`, ok: true},
			{args: `{"customer": "cus_1", "amount": 1, "currency": "USD", "payment_method": "pm_1", "description": "tea"}`, ok: true},
			{args: `{"customer": "cus_1", "amount": 0, "currency": "eur"}`},
			{args: `{"customer": "cus_1", "amount": 19.5, "currency": "eur"}`},
			{args: `{"customer": "cus_1", "amount": "1999", "currency": "eur"}`},
			{args: `{"customer": "cus_1", "amount": 1999, "currency": "euro"}`},
			{args: `{"customer": "", "amount": 1999, "currency": "eur"}`},
			{args: `{"amount": 1999, "currency": "eur"}`},
			{args: `{"customer": "cus_1", "amount": 1999, "currency": "eur", "extra": 1}`},
			{args: `{"customer": "cus\n1", "amount": 1999, "currency": "eur"}`, goOnly: true},
		}},
		email.Name: {email.ArgsSchema(), func(a json.RawMessage) error { _, err := email.ParseArgs(a); return err }, []sample{
			{args: `{"to": ["a@example.com"], "subject": "Hi", "text": "Hello"}`, ok: true},
			{args: `{"to": ["a@example.com"], "cc": ["b@example.com"], "subject": "Hi", "html": "<p>Hello</p>", "reply_to": "c@example.com"}`, ok: true},
			{args: `{"to": [], "subject": "Hi", "text": "Hello"}`},
			{args: `{"subject": "Hi", "text": "Hello"}`},
			{args: `{"to": ["a@example.com"], "text": "Hello"}`},
			{args: `{"to": ["a@example.com"], "subject": "", "text": "Hello"}`},
			{args: `{"to": "a@example.com", "subject": "Hi", "text": "Hello"}`},
			{args: `{"to": ["a@example.com"], "subject": "Hi", "text": "Hello", "bcc": ["b@example.com"]}`},
			{args: `{"to": ["a@example.com"], "subject": "Hi"}`, goOnly: true},
			{args: `{"to": ["not an address"], "subject": "Hi", "text": "Hello"}`, goOnly: true},
		}},
		ticket.Name: {ticket.ArgsSchema(), func(a json.RawMessage) error { _, err := ticket.ParseArgs(a); return err }, []sample{
			{args: `{"subject": "Refund", "body": "Please refund order 7."}`, ok: true},
			{args: `{"subject": "Refund", "body": "b", "requester_email": "a@example.com", "priority": "urgent", "tags": ["refund", "vip"]}`, ok: true},
			{args: `{"subject": "Refund", "body": "b", "priority": "asap"}`},
			{args: `{"subject": "Refund", "body": "b", "tags": ["two words"]}`},
			{args: `{"subject": "Refund", "body": "b", "tags": ["a,b"]}`},
			{args: `{"subject": "Refund", "body": ""}`},
			{args: `{"body": "b"}`},
			{args: `{"subject": "Refund", "body": "b", "status": "open"}`},
		}},
		webhook.Name: {webhook.ArgsSchema(), hook.ValidateArgs, []sample{
			{args: `{"endpoint": "orders", "payload": {"order": 7}}`, ok: true},
			{args: `{"endpoint": "orders", "payload": [1]}`},
			{args: `{"endpoint": "https://example.com", "payload": {}}`},
			{args: `{"endpoint": "orders"}`},
			{args: `{"endpoint": "orders", "payload": {}, "url": "x"}`},
			{args: `{"endpoint": "billing", "payload": {}}`, goOnly: true},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			var s jsonschema.Schema
			require.NoError(t, json.Unmarshal(tc.schema, &s))
			resolved, err := s.Resolve(nil)
			require.NoError(t, err)
			for _, sm := range tc.samples {
				goErr := tc.validate(json.RawMessage(sm.args))
				if sm.ok {
					require.NoError(t, goErr, sm.args)
				} else {
					var argErr *effects.ArgError
					require.ErrorAs(t, goErr, &argErr, sm.args)
				}
				var instance any
				require.NoError(t, json.Unmarshal([]byte(sm.args), &instance))
				schemaErr := resolved.Validate(instance)
				if sm.ok || sm.goOnly {
					require.NoError(t, schemaErr, sm.args)
				} else {
					require.Error(t, schemaErr, sm.args)
				}
			}
		})
	}
}

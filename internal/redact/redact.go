// Package redact names the fields that never reach a log line, and hides
// them in a JSON document: an effect's personal fields (addresses,
// subjects, bodies), whole argument objects, and secrets. The logger's net
// (package cli) and the operator console's intent page (package console)
// both use it, so that what a log hides a page hides too.
package redact

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Value replaces a redacted field's value.
const Value = "[redacted]"

// keys are the field names whose values are redacted, lowercase.
var keys = map[string]bool{
	"args": true, "arguments": true, "payload": true,
	"to": true, "cc": true, "bcc": true, "reply_to": true, "requester_email": true, "recipients": true,
	"subject": true, "text": true, "html": true, "body": true,
	"api_key": true, "authorization": true, "password": true, "secret": true, "token": true,
}

// Key reports whether a field named key (in any case) is redacted.
func Key(key string) bool { return keys[strings.ToLower(key)] }

// JSON returns doc, indented, with the value of every object field that Key
// names replaced by Value, at any depth. The document itself is not
// replaced even when it is an intent's "args": its other fields (an amount,
// a currency, an endpoint's name) are what an operator needs to see. A
// document that is not JSON is answered with Value alone, since what it
// holds cannot be told.
func JSON(doc json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	// Numbers are kept as written: 1e400 or a 20-digit id must not be
	// rounded on the way to the page.
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return Value
	}
	b, err := json.MarshalIndent(walk(v), "", "  ")
	if err != nil {
		return Value
	}
	return string(b)
}

func walk(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, field := range v {
			if Key(k) {
				v[k] = Value
			} else {
				v[k] = walk(field)
			}
		}
	case []any:
		for i := range v {
			v[i] = walk(v[i])
		}
	}
	return v
}

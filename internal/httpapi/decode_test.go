package httpapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/outbox"
)

func TestDecodeEnqueue(t *testing.T) {
	t.Parallel()

	req, err := decodeEnqueue([]byte(` {"effect": "noop", "args": {"a": [1, {"b": null}], "c": 1.0e3}, "requested_by": null} `))
	require.NoError(t, err)
	require.Equal(t, "noop", *req.Effect)
	require.JSONEq(t, `{"a": [1, {"b": null}], "c": 1.0e3}`, string(req.Args))
	require.Equal(t, `{"a": [1, {"b": null}], "c": 1.0e3}`, string(req.Args), "args are kept as sent")
	require.Nil(t, req.RequestedBy)

	for body, want := range map[string]string{
		``:                                       "request body is empty; expected a JSON object",
		`   `:                                    "request body is empty; expected a JSON object",
		`{"effect": "noop"`:                      "request body ends in the middle of a JSON value",
		`{"effect": "noop", "args": {}} []`:      "unexpected data after the JSON value (at byte 31)",
		`{"effect": "noop", "args": {}, "x": 1}`: `unknown field "x"`,
		`{"effect": 1, "args": {}}`:              "effect must be a string, not a number",
		`{"effect": "noop", "args": {}, "requested_by": []}`: "requested_by must be a string, not an array",
		`[]`:     "request body must be a JSON object, not an array",
		`"noop"`: "request body must be a JSON object, not a string",
		`{"effect": "a", "effect": "b", "args": {}}`:          `duplicate name "effect" in an object (at byte 16)`,
		`{"args": {"x": {"y": 1, "y": 2}}, "effect": "noop"}`: `duplicate name "y" in an object (at byte 24)`,
		"{\"effect\": \"n\xc3\x28\"}":                         "request body is not valid UTF-8 (at byte 13)",
		`{"effect": "noop", "args": {}}}`:                     "invalid JSON near byte 30: invalid character '}' looking for beginning of value",
		`{"args": {}}`:                                        `missing field "effect"`,
		`{"effect": "noop"}`:                                  `missing field "args"`,
		`{"effect": nul}`:                                     "invalid JSON near byte 11: invalid character '}' in literal null (expecting 'l')",
	} {
		_, err := decodeEnqueue([]byte(body))
		require.Error(t, err, body)
		var oe *outbox.Error
		require.True(t, errors.As(err, &oe), body)
		require.Equal(t, apierror.CodeInvalidJSON, oe.Code, body)
		require.Equal(t, want, oe.Message, body)
	}

	deep := `{"effect": "noop", "args": ` + strings.Repeat(`{"a":`, DepthMax) + `1` + strings.Repeat(`}`, DepthMax) + `}`
	_, err = decodeEnqueue([]byte(deep))
	require.ErrorContains(t, err, "nested deeper than 64 levels")
	ok := `{"effect": "noop", "args": ` + strings.Repeat(`{"a":`, DepthMax-1) + `1` + strings.Repeat(`}`, DepthMax-1) + `}`
	_, err = decodeEnqueue([]byte(ok))
	require.NoError(t, err)

	long := `{"effect": "noop", "args": {"` + strings.Repeat("é", 30) + `": 1, "` + strings.Repeat("é", 30) + `": 2}}`
	_, err = decodeEnqueue([]byte(long))
	require.ErrorContains(t, err, `"`+strings.Repeat("é", 20)+`"...`)
}

// FuzzDecodeEnqueue checks the enqueue request decoder on any body: it never
// panics; it refuses with invalid_json, or accepts a body that is valid JSON
// with a string effect and JSON args, kept as sent.
func FuzzDecodeEnqueue(f *testing.F) {
	for _, seed := range []string{
		`{"effect": "noop", "args": {"amount": 1999, "currency": "eur"}}`,
		`{"effect": "charge", "args": {"customer": "cus_1", "amount": 1.0e3}, "requested_by": "agent"}`,
		`{"effect": "noop", "args": {"a": 1, "a": 2}}`,
		`{"effect": "noop", "args": [[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]}`,
		`{"effect": 1, "args": {}}`,
		`{"effect": "noop", "args": {}, "extra": true}`,
		`{"effect": "noop", "args": {}} trailing`,
		"{\"effect\": \"\xff\", \"args\": {}}",
		`{"effect": "noop", "args": "\u0000\ud800"}`,
		`{"effect": "noop", "args": {"n": 1e1000000}}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeEnqueue(body)
		if err != nil {
			var oe *outbox.Error
			require.True(t, errors.As(err, &oe), "error %v is not an *outbox.Error", err)
			require.Equal(t, apierror.CodeInvalidJSON, oe.Code)
			require.NotEmpty(t, oe.Message)
			return
		}
		require.True(t, json.Valid(body))
		require.NotNil(t, req.Effect)
		require.True(t, json.Valid(req.Args), "args %q", req.Args)
	})
}

package argcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"strconv"
	"strings"

	"github.com/outbox-dev/outbox/effects"
)

// Object decodes args, which must be a JSON object, into v, a pointer to a
// struct. Unknown fields and values of the wrong JSON type are refused with an
// *effects.ArgError naming the field.
func Object(args json.RawMessage, v any) error {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return &effects.ArgError{Message: "must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return &effects.ArgError{Message: "must be a single JSON object"}
	}
	return nil
}

func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return &effects.ArgError{Field: typeErr.Field, Message: "must be " + jsonKind(typeErr.Type.Kind().String())}
	}
	// encoding/json reports an unknown field only in its message.
	if msg := err.Error(); strings.HasPrefix(msg, `json: unknown field "`) {
		field := strings.TrimSuffix(strings.TrimPrefix(msg, `json: unknown field "`), `"`)
		return &effects.ArgError{Field: field, Message: "is not a known argument"}
	}
	return &effects.ArgError{Message: "must be a valid JSON object"}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "bool":
		return "true or false"
	}
	return "a number"
}

// Integer reads a JSON number that is a whole number, in any of its JSON
// spellings (1999, 1999.0, 1.999e3), since intents that differ only in such
// spelling are the same action. It refuses numbers beyond ±2^53, which JSON
// implementations do not agree on.
func Integer(field string, raw json.RawMessage) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return 0, &effects.ArgError{Field: field, Message: "must be a whole number"}
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, &effects.ArgError{Field: field, Message: "must be a whole number"}
	}
	return int64(f), nil
}

// Address checks one email address, as RFC 5322 allows it ("a@example.com"
// or "Name <a@example.com>"), and returns it parsed.
func Address(field, s string) (*mail.Address, error) {
	if s == "" {
		return nil, &effects.ArgError{Field: field, Message: "must be an email address"}
	}
	if strings.ContainsAny(s, "\r\n") {
		return nil, &effects.ArgError{Field: field, Message: "must not contain line breaks"}
	}
	a, err := mail.ParseAddress(s)
	if err != nil {
		return nil, &effects.ArgError{Field: field, Message: "is not a valid email address"}
	}
	return a, nil
}

// Addresses checks a list of email addresses of min to max entries.
func Addresses(field string, list []string, min, max int) ([]*mail.Address, error) {
	if len(list) < min || len(list) > max {
		if min == 0 {
			return nil, &effects.ArgError{Field: field, Message: fmt.Sprintf("must hold at most %d addresses", max)}
		}
		return nil, &effects.ArgError{Field: field, Message: fmt.Sprintf("must hold %d to %d addresses", min, max)}
	}
	out := make([]*mail.Address, len(list))
	for i, s := range list {
		a, err := Address(fmt.Sprintf("%s[%d]", field, i), s)
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// Text checks a string argument: required or not, at most maxLen bytes, and
// on one line when oneLine (a header, a subject).
func Text(field string, s *string, required bool, maxLen int, oneLine bool) error {
	if s == nil {
		if required {
			return &effects.ArgError{Field: field, Message: "is required"}
		}
		return nil
	}
	if strings.TrimSpace(*s) == "" {
		if required {
			return &effects.ArgError{Field: field, Message: "must not be empty"}
		}
		return &effects.ArgError{Field: field, Message: "must not be empty when given"}
	}
	if len(*s) > maxLen {
		return &effects.ArgError{Field: field, Message: fmt.Sprintf("must be at most %d bytes", maxLen)}
	}
	if oneLine && strings.ContainsAny(*s, "\r\n") {
		return &effects.ArgError{Field: field, Message: "must not contain line breaks"}
	}
	return nil
}

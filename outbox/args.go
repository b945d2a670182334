package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/outbox-dev/outbox/effects"
)

// The checks of an intent's arguments that hold whatever the effect:
// JSON that jsonb stores as it was sent, within its limits.

// argsError turns an effect's validation error into an *Error naming the field.
func argsError(err error) error {
	var ae *effects.ArgError
	if errors.As(err, &ae) {
		field := "args"
		if ae.Field != "" {
			field = "args." + ae.Field
		}
		return &Error{Code: CodeInvalidArgs, Field: field, Message: ae.Message}
	}
	return &Error{Code: CodeInvalidArgs, Field: "args", Message: err.Error()}
}

func marshalArgs(args any) ([]byte, error) {
	var raw []byte
	switch a := args.(type) {
	case nil:
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "must be a JSON object"}
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	default:
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "cannot be encoded as JSON: " + err.Error()}
		}
	}
	trimmed := bytes.TrimSpace(raw)
	if !json.Valid(trimmed) {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "must be valid JSON"}
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "must be a JSON object"}
	}
	if !utf8.Valid(trimmed) {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: "must be valid UTF-8"}
	}
	// Postgres's jsonb refuses \u0000 and unpaired surrogates, which
	// encoding/json lets through; say so here rather than surface a database
	// error that would also abort the caller's transaction.
	if msg := jsonbEscapeProblem(trimmed); msg != "" {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: msg}
	}
	if msg := jsonbLimitProblem(trimmed); msg != "" {
		return nil, &Error{Code: CodeInvalidArgs, Field: "args", Message: msg}
	}
	return trimmed, nil
}

// Limits of what jsonb stores, checked before the database refuses them (a
// refusal there would abort the caller's transaction).
const (
	// argsDepthMax is the deepest nesting accepted; Postgres would stop at
	// its stack depth limit, far deeper, and no effect needs more.
	argsDepthMax = 100
	// argsExponentMax bounds a number's decimal exponent; numeric overflows
	// past about 131,072 digits.
	argsExponentMax = 100_000
)

// jsonbLimitProblem scans valid JSON for nesting deeper than argsDepthMax and
// numbers whose exponent numeric cannot hold. It does not allocate: it runs
// on every enqueue.
func jsonbLimitProblem(b []byte) string {
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > argsDepthMax {
				return "must not nest deeper than " + strconv.Itoa(argsDepthMax) + " levels"
			}
		case '}', ']':
			depth--
		case 'e', 'E':
			// Outside a string, only a number's exponent has an e.
			j := i + 1
			if j < len(b) && (b[j] == '+' || b[j] == '-') {
				j++
			}
			exp := 0
			for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
				if exp = exp*10 + int(b[j]-'0'); exp > argsExponentMax {
					return "has a number too large or too precise to store"
				}
			}
			i = j - 1
		}
	}
	return ""
}

// jsonbEscapeProblem finds the \u escapes of valid JSON that jsonb refuses.
func jsonbEscapeProblem(b []byte) string {
	hex := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 32)
		return rune(v), err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex(i)
		if !ok {
			continue
		}
		switch {
		case r == 0:
			return "must not contain \\u0000"
		case r >= 0xd800 && r <= 0xdbff:
			if lo, ok := hex(i + 6); !ok || lo < 0xdc00 || lo > 0xdfff {
				return "contains an unpaired UTF-16 surrogate escape"
			}
			i += 11
		case r >= 0xdc00 && r <= 0xdfff:
			return "contains an unpaired UTF-16 surrogate escape"
		default:
			i += 5
		}
	}
	return ""
}

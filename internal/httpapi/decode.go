package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/outbox"
)

const (
	// BodyMax is the largest request body accepted: 1 MiB. A larger one is
	// refused with 413 body_too_large.
	BodyMax = 1 << 20

	// DepthMax is the deepest nesting of arrays and objects accepted in a
	// request body. Effects' arguments are flat records; a deeper body is
	// refused with invalid_json rather than handed to parsers that recurse.
	DepthMax = 64
)

// readBody reads r's body, at most BodyMax bytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if err := checkContentType(r); err != nil {
		return nil, err
	}
	// MaxBytesReader also tells the server to close the connection after
	// the answer, so the rest of an oversized body is never read.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, BodyMax))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, &outbox.Error{Code: apierror.CodeBodyTooLarge, Message: "request body is larger than 1 MiB (1048576 bytes)"}
	case err != nil:
		return nil, &outbox.Error{Code: apierror.CodeInvalidJSON, Message: "error reading request body: " + err.Error()}
	}
	return body, nil
}

// CodeUnsupportedMediaType is the code of a write whose body is declared as
// something other than JSON (415).
const CodeUnsupportedMediaType = "unsupported_media_type"

// checkContentType refuses a body declared as anything but JSON
// (application/json, or a +json type): an HTML form or a text/plain fetch
// from a browser page must not pass for an API call. A request without a
// Content-Type is read as JSON, as most HTTP clients send one only when told.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType, field: "Content-Type",
		message: "the body must be JSON, sent with Content-Type: application/json"}
}

// decodeStrict decodes body, a single JSON object, into v, a pointer to a
// struct: strictly, so that a mistake in a request is an error naming it
// rather than a field silently ignored or a value silently chosen. It refuses
// invalid UTF-8, syntax errors, duplicate object names (anywhere), nesting
// deeper than DepthMax, data after the object, names v does not have, and
// values of the wrong type. Every error is an *outbox.Error with code
// invalid_json.
func decodeStrict(body []byte, v any) error {
	if err := checkJSON(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return invalidJSON(describeDecodeError(err))
	}
	return nil
}

// describeDecodeError says what is wrong in a body that checkJSON accepted:
// an unknown field or a value of the wrong type.
func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		want := jsonType(typeErr.Type.Kind().String())
		if typeErr.Field == "" {
			return fmt.Sprintf("request body must be a JSON object, not %s", article(typeErr.Value))
		}
		return fmt.Sprintf("%s must be %s, not %s", typeErr.Field, want, article(typeErr.Value))
	}
	// encoding/json's one error without a type: json: unknown field "x".
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + name
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonType names a Go kind as the JSON type that decodes into it.
func jsonType(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	}
	return "a number"
}

func article(jsonValue string) string {
	switch jsonValue {
	case "array", "object":
		return "an " + jsonValue
	case "null":
		return "null"
	}
	return "a " + jsonValue
}

func invalidJSON(msg string) error {
	return &outbox.Error{Code: apierror.CodeInvalidJSON, Message: msg}
}

// frame is one open array or object in checkJSON's walk.
type frame struct {
	object bool
	// names are the object's member names so far.
	names map[string]struct{}
	// wantName is set when the object's next token is a member name (or
	// its end).
	wantName bool
}

// checkJSON checks that body is exactly one JSON value, in valid UTF-8,
// nested at most DepthMax deep, with no object holding a name twice.
// encoding/json alone would keep the last of two equal names, and another
// parser the first: a body meaning different things to different readers
// is refused instead.
func checkJSON(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalidJSON("request body is empty; expected a JSON object")
	}
	if !utf8.Valid(body) {
		return invalidJSON(fmt.Sprintf("request body is not valid UTF-8 (at byte %d)", firstInvalidUTF8(body)))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var stack []*frame
	done := false // the top-level value is complete
	for {
		at := tokenStart(body, dec.InputOffset())
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if !done {
				return invalidJSON("request body ends in the middle of a JSON value")
			}
			return nil
		}
		if err != nil {
			return invalidJSON(syntaxMessage(err, at))
		}
		if done {
			return invalidJSON(fmt.Sprintf("unexpected data after the JSON value (at byte %d)", at))
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.wantName {
			if name, ok := tok.(string); ok {
				if _, dup := top.names[name]; dup {
					return invalidJSON(fmt.Sprintf("duplicate name %s in an object (at byte %d)", quoteShort(name), at))
				}
				top.names[name] = struct{}{}
				top.wantName = false
				continue
			}
			// Otherwise it is the object's closing brace, handled below.
		}
		completed := true // tok completes a value
		if delim, ok := tok.(json.Delim); ok {
			switch delim {
			case '{', '[':
				if len(stack) >= DepthMax {
					return invalidJSON(fmt.Sprintf("request body is nested deeper than %d levels", DepthMax))
				}
				f := &frame{object: delim == '{', wantName: delim == '{'}
				if f.object {
					f.names = map[string]struct{}{}
				}
				stack = append(stack, f)
				completed = false
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		}
		if !completed {
			continue
		}
		if len(stack) == 0 {
			done = true
		} else if parent := stack[len(stack)-1]; parent.object {
			parent.wantName = true
		}
	}
}

// tokenStart returns where the token after offset starts: past the white
// space and the separators that json.Decoder.Token consumes silently.
func tokenStart(body []byte, offset int64) int64 {
	for offset < int64(len(body)) {
		switch body[offset] {
		case ' ', '\t', '\n', '\r', ',', ':':
			offset++
			continue
		}
		break
	}
	return offset
}

// syntaxMessage describes a syntax error in the token starting at at.
// (json.SyntaxError's own offset counts from where the decoder's buffer
// started, not from the body's start.)
func syntaxMessage(err error, at int64) string {
	return fmt.Sprintf("invalid JSON near byte %d: %s", at, strings.TrimPrefix(err.Error(), "json: "))
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// quoteShort quotes s for an error message, cut to 40 bytes: names come from
// the request and are echoed, not logged.
func quoteShort(s string) string {
	if len(s) > 40 {
		cut := 40
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q...", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}

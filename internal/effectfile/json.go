package effectfile

import (
	"bytes"
	"encoding/json"
)

// MarshalJSON encodes v without escaping <, > and &: a provider receives
// the text the agent wrote.
func MarshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

package effects

import (
	"encoding/json"
	"slices"
	"strings"
)

// ProviderObjectID picks the id of what the provider made (a PaymentIntent,
// a ticket, a Message-ID) out of an effect's result: its top-level "id", or
// else the first, by name, top-level field ending in "_id", whichever is a
// non-empty string or a number; "" when none is. A number is returned as
// the result spells it, so that an id beyond a float's precision is not
// rounded. The workers record it in each attempt's River job output and the
// operator console shows it, so both read it here.
func ProviderObjectID(result json.RawMessage) string {
	var fields map[string]json.RawMessage
	if len(result) == 0 || json.Unmarshal(result, &fields) != nil {
		return ""
	}
	var more []string
	for k := range fields {
		if strings.HasSuffix(k, "_id") {
			more = append(more, k)
		}
	}
	slices.Sort(more) // a stable choice when there are several
	for _, k := range append([]string{"id"}, more...) {
		var s string
		if json.Unmarshal(fields[k], &s) == nil && s != "" {
			return s
		}
		var n json.Number
		if json.Unmarshal(fields[k], &n) == nil && n != "" {
			return n.String()
		}
	}
	return ""
}

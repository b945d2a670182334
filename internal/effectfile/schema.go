package effectfile

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/outbox-dev/outbox/effects"
)

// NoLoader is a jsonschema loader that refuses every remote schema: an
// argument schema has local references only.
type NoLoader struct{}

// Load implements jsonschema.URLLoader: it refuses url.
func (NoLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("remote schema %s refused", url)
}

// CheckApprovalRule checks an approval rule's argument against the args
// schema of the effect name: a top-level property, numeric for < and >.
func CheckApprovalRule(name string, schemaJSON json.RawMessage, arg string, numeric bool) error {
	if arg == "" {
		return nil
	}
	var schema struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(schemaJSON, &schema)
	prop, ok := schema.Properties[arg]
	if !ok {
		return fmt.Errorf("effect %s has no top-level argument %q in its declared schema", name, arg)
	}
	if numeric && prop.Type != "number" && prop.Type != "integer" {
		return fmt.Errorf("effect %s: argument %q is not declared a number or integer, so it cannot be compared with < or >", name, arg)
	}
	return nil
}

// SchemaArgError turns the schema's first leaf failure into an ArgError naming
// its field ("to[2]", "customer.id").
func SchemaArgError(verr *jsonschema.ValidationError) *effects.ArgError {
	for len(verr.Causes) > 0 {
		verr = verr.Causes[0]
	}
	var field strings.Builder
	for _, seg := range verr.InstanceLocation {
		if _, err := strconv.Atoi(seg); err == nil {
			field.WriteString("[" + seg + "]")
			continue
		}
		if field.Len() > 0 {
			field.WriteByte('.')
		}
		field.WriteString(seg)
	}
	msg := verr.ErrorKind.LocalizedString(englishPrinter)
	if req, ok := verr.ErrorKind.(*kind.Required); ok && len(req.Missing) > 0 {
		// The schema's error is on the object; the caller's is the
		// missing member.
		if field.Len() > 0 {
			field.WriteByte('.')
		}
		field.WriteString(req.Missing[0])
		msg = "is required"
	}
	return &effects.ArgError{Field: field.String(), Message: msg}
}

var englishPrinter = message.NewPrinter(language.English)

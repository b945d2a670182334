package upstream

import (
	"encoding/json"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// The typed CEL variables of an upstream tool's rules and look-ups: a
// rule's "error.code == \"x\"" is refused when the file loads, not met
// at the first error.

// celResult is `result`: a tool's answer.
type celResult struct {
	IsError           bool            `cel:"isError"`
	Content           []*celBlock     `cel:"content"`
	StructuredContent *structpb.Value `cel:"structuredContent"`
	Data              *structpb.Value `cel:"data"`
}

// celBlock is one content block; a text block also has json, its text
// parsed (null when it is not JSON).
type celBlock struct {
	Type     string          `cel:"type"`
	Text     string          `cel:"text"`
	MimeType string          `cel:"mimeType"`
	JSON     *structpb.Value `cel:"json"`
}

// celError is `error`: a JSON-RPC error.
type celError struct {
	Code    int64           `cel:"code"`
	Message string          `cel:"message"`
	Data    *structpb.Value `cel:"data"`
}

var mcpCondEnvs = func() [2]*cel.Env {
	answer, err := cel.NewEnv(
		ext.NativeTypes(ext.ParseStructTags(true), reflect.TypeFor[celResult](), reflect.TypeFor[celBlock](), reflect.TypeFor[celError]()),
		cel.Variable("result", cel.ObjectType("upstream.celResult")),
		cel.Variable("error", cel.ObjectType("upstream.celError")),
		cel.Variable("args", cel.DynType),
		cel.Variable("provider_key", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
	)
	if err != nil {
		panic(err) // a broken declaration above, not user input
	}
	item, err := answer.Extend(cel.Variable("item", cel.DynType))
	if err != nil {
		panic(err)
	}
	return [2]*cel.Env{answer, item}
}()

// compileMCPCondition compiles expr over an upstream's answer (or, with
// withItem, a look-up's item).
func compileMCPCondition(expr string, withItem bool, want *cel.Type) (*effectfile.Condition, error) {
	env := mcpCondEnvs[0]
	if withItem {
		env = mcpCondEnvs[1]
	}
	return effectfile.CompileIn(env, expr, want)
}

// mcpVars are the variables of one evaluation over an upstream's answer.
type mcpVars struct {
	result      *celResult
	err         *celError
	args        any
	providerKey string
}

func (v *mcpVars) activation(item any) map[string]any {
	m := map[string]any{"args": v.args, "provider_key": v.providerKey}
	// A nil pointer of the native type is not null to CEL: the variable is
	// given as null explicitly.
	if v.result != nil {
		m["result"] = v.result
	} else {
		m["result"] = types.NullValue
	}
	if v.err != nil {
		m["error"] = v.err
	} else {
		m["error"] = types.NullValue
	}
	if item != nil {
		m["item"] = item
	}
	return m
}

// newCELResult converts a tool's answer for CEL.
func newCELResult(r *mcp.CallToolResult) *celResult {
	out := &celResult{IsError: r.IsError, StructuredContent: structValue(r.StructuredContent)}
	var texts []*celBlock
	for _, c := range r.Content {
		b := &celBlock{}
		switch c := c.(type) {
		case *mcp.TextContent:
			b.Type, b.Text = "text", c.Text
			var parsed any
			if json.Unmarshal([]byte(c.Text), &parsed) == nil {
				b.JSON = structValue(parsed)
			}
			texts = append(texts, b)
		case *mcp.ImageContent:
			b.Type, b.MimeType = "image", c.MIMEType
		case *mcp.AudioContent:
			b.Type, b.MimeType = "audio", c.MIMEType
		case *mcp.ResourceLink:
			b.Type, b.MimeType = "resource_link", c.MIMEType
		case *mcp.EmbeddedResource:
			b.Type = "resource"
		default:
			b.Type = "other"
		}
		out.Content = append(out.Content, b)
	}
	switch {
	case out.StructuredContent != nil:
		out.Data = out.StructuredContent
	case len(texts) == 1 && texts[0].JSON != nil:
		out.Data = texts[0].JSON
	}
	return out
}

// structValue converts a decoded JSON value (or anything that marshals
// to JSON) for CEL; nil when there is nothing.
func structValue(v any) *structpb.Value {
	if v == nil {
		return nil
	}
	var plainV any
	raw, err := json.Marshal(v)
	if err != nil || json.Unmarshal(raw, &plainV) != nil || plainV == nil {
		return nil
	}
	sv, err := structpb.NewValue(plainV)
	if err != nil {
		return nil
	}
	return sv
}

// plainJSON turns a value a CEL expression gave (a structpb value, a CEL
// value) back into plain Go JSON values.
func plainJSON(v any) any {
	switch v := v.(type) {
	case *structpb.Value:
		return v.AsInterface()
	case *structpb.Struct:
		return v.AsMap()
	case *structpb.ListValue:
		return v.AsSlice()
	case ref.Val:
		if native, err := v.ConvertToNative(reflect.TypeFor[*structpb.Value]()); err == nil {
			if sv, ok := native.(*structpb.Value); ok {
				return sv.AsInterface()
			}
		}
		return v.Value()
	}
	return v
}

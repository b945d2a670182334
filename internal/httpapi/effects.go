package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/mcpserver"
)

// effectInfo is one effect of GET /v1/effects.
type effectInfo struct {
	// ArgsSchema is the JSON Schema of the effect's arguments: the same the
	// MCP tool of the effect takes (without idempotency_key and
	// new_action), or any object for an effect without a tool.
	ArgsSchema json.RawMessage `json:"args_schema"`
	// DedupeWindowSeconds is the provider's dedupe window, for a
	// deduplicated effect.
	DedupeWindowSeconds *int64 `json:"dedupe_window_seconds"`
	// Description says what the effect does, for a declared effect (its
	// file's description); empty for the built-ins, whose MCP tools say it.
	Description string `json:"description,omitempty"`
	// Guarantee is the effect's guarantee; for an effect whose guarantee
	// depends on its arguments (a webhook), the weakest it can have, with
	// GuaranteeDependsOnArgs set.
	Guarantee              effects.Guarantee `json:"guarantee"`
	GuaranteeDependsOnArgs bool              `json:"guarantee_depends_on_args"`
	Name                   string            `json:"name"`

	// effect is the effect, to tell which namespaces see it
	// (effects.AllowedIn).
	effect effects.Effect
}

// effectsAnswer is GET /v1/effects' answer.
type effectsAnswer struct {
	Effects []effectInfo `json:"effects"`
}

// newEffectsAnswer lists the effects of registry, with the arguments'
// schemas of tools.
func newEffectsAnswer(registry *effects.Registry, tools []*mcpserver.EffectTool) (*effectsAnswer, error) {
	schemas := map[string]json.RawMessage{}
	for _, tool := range tools {
		if tool == nil || tool.InputSchema == nil {
			continue
		}
		b, err := json.Marshal(tool.InputSchema)
		if err != nil {
			return nil, err
		}
		schemas[tool.Effect] = b
	}
	answer := &effectsAnswer{Effects: []effectInfo{}}
	if registry == nil {
		return answer, nil
	}
	for _, name := range registry.Names() {
		e, _ := registry.Get(name)
		info := effectInfo{Name: name, Guarantee: e.Guarantee(), ArgsSchema: schemas[name], effect: e}
		if s, ok := e.(effects.ArgsSchemaer); ok && info.ArgsSchema == nil {
			// A recorded MCP upstream tool's tool lists its raw schema with
			// outbox's own arguments: the effect's is the pinned one, as
			// the intent's args take it.
			info.ArgsSchema = s.ArgsSchema()
		}
		if info.ArgsSchema == nil {
			info.ArgsSchema = json.RawMessage(`{"type":"object"}`)
		}
		if _, ok := e.(effects.ArgsGuaranteer); ok {
			info.GuaranteeDependsOnArgs = true
		}
		if d, ok := e.(effects.Describer); ok {
			info.Description = d.Description()
		}
		if info.Guarantee == effects.GuaranteeDeduplicated || info.GuaranteeDependsOnArgs {
			seconds := int64(effects.DedupeWindow(e).Seconds())
			info.DedupeWindowSeconds = &seconds
		}
		answer.Effects = append(answer.Effects, info)
	}
	return answer, nil
}

// listEffects is GET /v1/effects: what this server runs, and what each
// effect takes.
func (h *Handler) listEffects(w http.ResponseWriter, r *http.Request, namespace string) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	// Only the effects the caller's namespace may enqueue: a namespace
	// does not learn of another's tools.
	answer := &effectsAnswer{Effects: make([]effectInfo, 0, len(h.effects.Effects))}
	for _, info := range h.effects.Effects {
		if effects.AllowedIn(info.effect, namespace) {
			answer.Effects = append(answer.Effects, info)
		}
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/origin"
	"github.com/outbox-dev/outbox/outbox"
)

// enqueueRequest is POST /v1/intents' body.
type enqueueRequest struct {
	Args   json.RawMessage `json:"args"`
	Effect *string         `json:"effect"`
	// NewAction confirms, for a model's key, that an identical action
	// recorded moments before under another key is another action.
	NewAction   bool    `json:"new_action"`
	RequestedBy *string `json:"requested_by"`
	// RequireApproval asks for an operator's approval before it runs.
	RequireApproval bool `json:"require_approval"`
}

// enqueueAnswer is POST /v1/intents' answer: the intent and "duplicate".
type enqueueAnswer struct {
	*outbox.Intent
	Duplicate bool `json:"duplicate"`
	// PossibleDuplicateOf is the earlier key the model-key guard (mode
	// replay) answered with.
	PossibleDuplicateOf string `json:"possible_duplicate_of,omitempty"`
}

// keySourceHeader says where a request's Idempotency-Key comes from. A
// caller that forwards a model's key says "model", and the key is then
// guarded as MCP's are (package keyguard); the orchestrator's own keys are
// taken as given.
const keySourceHeader = "Idempotency-Key-Source"

// decodeEnqueue decodes and checks POST /v1/intents' body.
func decodeEnqueue(body []byte) (*enqueueRequest, error) {
	var req enqueueRequest
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	switch {
	case req.Effect == nil:
		return nil, invalidJSON(`missing field "effect"`)
	case req.Args == nil:
		return nil, invalidJSON(`missing field "args"`)
	}
	return &req, nil
}

// enqueue is POST /v1/intents.
func (h *Handler) enqueue(w http.ResponseWriter, r *http.Request, namespace string) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	req, err := decodeEnqueue(body)
	if err != nil {
		return err
	}
	modelKey, err := modelKeySource(r)
	if err != nil {
		return err
	}
	var res *outbox.EnqueueResult
	var possibleDuplicateOf string
	if modelKey {
		p := &keyguard.Params{Args: req.Args, Effect: *req.Effect, EnqueuedBy: actor(r), Key: key, ModelKey: true,
			Namespace: namespace, NewAction: req.NewAction, RequireApproval: req.RequireApproval, Tool: *req.Effect}
		if req.RequestedBy != nil {
			p.RequestedBy = *req.RequestedBy
		}
		guarded, err := h.guard.Enqueue(r.Context(), p)
		if err != nil {
			return err
		}
		res, possibleDuplicateOf = guarded.EnqueueResult, guarded.PossibleDuplicateOf
	} else {
		params := &outbox.EnqueueParams{
			Args:      req.Args,
			Effect:    *req.Effect,
			Key:       key,
			Namespace: namespace,

			RequireApproval: req.RequireApproval,
		}
		if req.RequestedBy != nil {
			params.RequestedBy = *req.RequestedBy
		}
		// In a transaction of its own, shared with the requests enqueuing
		// at the same moment (outbox.Client.Enqueue).
		ctx := origin.With(r.Context(), origin.Origin{EnqueuedBy: actor(r), KeySource: string(outbox.KeySourceExplicit)})
		if res, err = h.client.Enqueue(ctx, params); err != nil {
			return err
		}
	}
	status := http.StatusCreated
	if res.Duplicate {
		w.Header().Set("Idempotent-Replayed", "true")
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/intents/"+keyPath(key))
	writeJSON(w, status, enqueueAnswer{Intent: res.Intent, Duplicate: res.Duplicate, PossibleDuplicateOf: possibleDuplicateOf})
	return nil
}

// modelKeySource reports whether the request says its key is a model's.
func modelKeySource(r *http.Request) (bool, error) {
	switch v := r.Header.Get(keySourceHeader); v {
	case "":
		return false, nil
	case "model":
		return true, nil
	default:
		return false, &outbox.Error{Code: outbox.CodeInvalidKey, Field: keySourceHeader, Message: fmt.Sprintf("must be model, not %q", v)}
	}
}

// idempotencyKey returns the request's Idempotency-Key, checked.
func idempotencyKey(r *http.Request) (string, error) {
	values := r.Header.Values("Idempotency-Key")
	switch {
	case len(values) == 0 || len(values) == 1 && values[0] == "":
		return "", &outbox.Error{Code: outbox.CodeIdempotencyKeyMissing,
			Message: "the header Idempotency-Key is required: one key per logical action, the same on every retry"}
	case len(values) > 1:
		return "", &outbox.Error{Code: outbox.CodeInvalidKey, Field: "Idempotency-Key", Message: "must be given once"}
	}
	key := values[0]
	if strings.HasPrefix(key, `"`) {
		var err error
		if key, err = parseSFString(key); err != nil {
			return "", &outbox.Error{Code: outbox.CodeInvalidKey, Field: "Idempotency-Key", Message: err.Error()}
		}
	}
	if err := outbox.ValidateKey(key); err != nil {
		var oe *outbox.Error
		if errors.As(err, &oe) {
			return "", &outbox.Error{Code: oe.Code, Field: "Idempotency-Key", Message: oe.Message}
		}
		return "", err
	}
	return key, nil
}

// parseSFString parses a structured-field string (RFC 8941, section 3.3.3),
// the form the IETF Idempotency-Key draft gives the header:
// "8e03978e-40d5-43e8-bc93-6894a57f9324". Its value is the key; \" and \\
// are its only escapes. A bare token, as most clients send, is taken as is.
func parseSFString(s string) (string, error) {
	if len(s) < 2 || !strings.HasSuffix(s, `"`) {
		return "", errors.New(`a quoted key must end with a quote: "key"`)
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s)-1 || (s[i] != '"' && s[i] != '\\') {
				return "", errors.New(`in a quoted key, a backslash may only escape " or \\`)
			}
			b.WriteByte(s[i])
		case c == '"':
			return "", errors.New(`a quote inside a quoted key must be escaped as \"`)
		case c < 0x20 || c > 0x7e:
			return "", errors.New("a quoted key holds printable ASCII only")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// keyPath is key as a path segment. url.PathEscape leaves "." alone, and a
// path of "." or ".." would be cleaned away by any router.
func keyPath(key string) string {
	if strings.Trim(key, ".") == "" {
		return strings.ReplaceAll(key, ".", "%2E")
	}
	return url.PathEscape(key)
}

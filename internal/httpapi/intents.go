package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/apierror"
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

// resolveRequest is POST /v1/intents/{key}/resolve's body.
type resolveRequest struct {
	Note    string `json:"note"`
	Outcome string `json:"outcome"`
}

// listAnswer is GET /v1/intents' answer.
type listAnswer struct {
	Intents    []*outbox.Intent `json:"intents"`
	NextCursor *string          `json:"next_cursor"`
}

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

// get is GET /v1/intents/{key}[?wait=30s].
func (h *Handler) get(w http.ResponseWriter, r *http.Request, namespace string) error {
	query, err := parseQuery(r, "wait")
	if err != nil {
		return err
	}
	var wait time.Duration
	if s, err := single(query, "wait"); err != nil {
		return err
	} else if s != "" {
		if wait, err = time.ParseDuration(s); err != nil || wait < 0 || wait > apierror.WaitMax {
			return &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "wait",
				Message: fmt.Sprintf("must be a duration from 0s to 60s, such as 30s; got %s", quoteShort(s))}
		}
	}
	intent, err := h.readIntent(r.Context(), namespace, r.PathValue("key"), wait)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, intent)
	return nil
}

// readIntent reads the intent, first waiting up to wait for it to be
// terminal. A wait that ends first answers the intent as it stands.
func (h *Handler) readIntent(ctx context.Context, namespace, key string, wait time.Duration) (*outbox.Intent, error) {
	if wait <= 0 {
		return h.client.Get(ctx, namespace, key)
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	intent, err := h.wait(waitCtx, namespace, key)
	if err == nil || ctx.Err() != nil || waitCtx.Err() == nil {
		return intent, err
	}
	if intent != nil && errors.Is(err, context.DeadlineExceeded) {
		return intent, nil
	}
	return h.client.Get(ctx, namespace, key)
}

// list is GET /v1/intents?state=&effect=&limit=&cursor=.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, namespace string) error {
	query, err := parseQuery(r, "state", "effect", "limit", "cursor")
	if err != nil {
		return err
	}
	params := &outbox.ListParams{Namespace: namespace, Limit: outbox.ListLimitDefault}
	for _, v := range query["state"] {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				params.States = append(params.States, outbox.State(s))
			}
		}
	}
	if params.Effect, err = single(query, "effect"); err != nil {
		return err
	}
	if params.Cursor, err = single(query, "cursor"); err != nil {
		return err
	}
	if s, err := single(query, "limit"); err != nil {
		return err
	} else if s != "" {
		limit, err := strconv.Atoi(s)
		if err != nil || limit < 1 || limit > outbox.ListLimitMax {
			return &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "limit",
				Message: fmt.Sprintf("must be a whole number from 1 to %d; got %s", outbox.ListLimitMax, quoteShort(s))}
		}
		params.Limit = limit
	}
	res, err := h.client.List(r.Context(), params)
	if err != nil {
		return err
	}
	answer := listAnswer{Intents: res.Intents}
	if res.NextCursor != "" {
		answer.NextCursor = &res.NextCursor
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

// cancel is POST /v1/intents/{key}/cancel. Its body, if any, is
// {"note": "..."}.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, namespace string) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var req struct {
		Note string `json:"note"`
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			return err
		}
	}
	intent, err := h.client.Cancel(r.Context(), &outbox.CancelParams{
		By:        actor(r),
		Key:       r.PathValue("key"),
		Namespace: namespace,
		Note:      req.Note,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, intent)
	return nil
}

// actor names the request's token for the record: access.APIActor of its
// fingerprint, never the token ("api:local" without tokens).
func actor(r *http.Request) string {
	p, _ := principalFrom(r.Context())
	return access.APIActor(p.name)
}

// resolve is POST /v1/intents/{key}/resolve.
func (h *Handler) resolve(w http.ResponseWriter, r *http.Request, namespace string) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var req resolveRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	intent, err := h.client.Resolve(r.Context(), &outbox.ResolveParams{
		By:        actor(r),
		Key:       r.PathValue("key"),
		Namespace: namespace,
		Note:      req.Note,
		Outcome:   outbox.Outcome(req.Outcome),
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, intent)
	return nil
}

// approvalRequest is POST /v1/intents/{key}/approve's and /deny's body.
type approvalRequest struct {
	ArgsSHA256 *string `json:"args_sha256"`
	Note       string  `json:"note"`
}

// approve is POST /v1/intents/{key}/approve.
func (h *Handler) approve(w http.ResponseWriter, r *http.Request, namespace string) error {
	return h.decide(w, r, namespace, h.client.Approve)
}

// deny is POST /v1/intents/{key}/deny.
func (h *Handler) deny(w http.ResponseWriter, r *http.Request, namespace string) error {
	return h.decide(w, r, namespace, h.client.Deny)
}

func (h *Handler) decide(w http.ResponseWriter, r *http.Request, namespace string,
	decide func(context.Context, *outbox.ApprovalParams) (*outbox.Intent, error),
) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var req approvalRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	if req.ArgsSHA256 == nil {
		return invalidJSON(`missing field "args_sha256"`)
	}
	intent, err := decide(r.Context(), &outbox.ApprovalParams{
		ArgsSHA256: *req.ArgsSHA256,
		By:         actor(r),
		Key:        r.PathValue("key"),
		Namespace:  namespace,
		Note:       req.Note,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, intent)
	return nil
}

// parseQuery parses r's query, refusing parameters other than allowed: a
// misspelt filter must not silently widen a listing.
func parseQuery(r *http.Request, allowed ...string) (url.Values, error) {
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "query", Message: "cannot be parsed: " + err.Error()}
	}
	for name := range query {
		known := false
		for _, a := range allowed {
			known = known || name == a
		}
		if !known {
			msg := "unknown parameter " + quoteShort(name)
			if len(allowed) > 0 {
				msg += "; known: " + strings.Join(allowed, ", ")
			}
			return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "query", Message: msg}
		}
	}
	return query, nil
}

// checkQuery refuses any query parameter.
func checkQuery(r *http.Request) error {
	_, err := parseQuery(r)
	return err
}

// single returns the one value of a query parameter ("" when absent).
func single(query url.Values, name string) (string, error) {
	switch values := query[name]; len(values) {
	case 0:
		return "", nil
	case 1:
		return values[0], nil
	}
	return "", &outbox.Error{Code: outbox.CodeInvalidArgs, Field: name, Message: "must be given once"}
}

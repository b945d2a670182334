package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/outbox-dev/outbox/outbox"
)

// resolveRequest is POST /v1/intents/{key}/resolve's body.
type resolveRequest struct {
	Note    string `json:"note"`
	Outcome string `json:"outcome"`
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

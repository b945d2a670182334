package console

import (
	"net/http"
	"time"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/redact"
	"github.com/outbox-dev/outbox/outbox"
)

// lookupHint says where to look for the provider's object of the built-in
// effects, from the provider key they send: what an operator checks before
// resolving an unknown intent. Other effects get none.
func lookupHint(effect, providerKey string) string {
	switch effect {
	case charge.Name:
		return "Stripe dashboard or API: the PaymentIntent created with Idempotency-Key " + providerKey + " (Stripe keeps keys for 24 hours; search payments by customer and amount after)."
	case email.Name:
		return "the mail server's log or the recipient's mailbox: the message whose Message-ID starts with " + providerKey + "@."
	case ticket.Name:
		return "Zendesk: the ticket whose external_id is " + providerKey + "."
	case webhook.Name:
		return "the receiver's log: the request with webhook-id " + providerKey + "."
	}
	return ""
}

// queueView is the unknown queue's and the approvals page's data.
type queueView struct {
	Rows        []*queueRow
	More        bool
	ApprovalTTL time.Duration
}

type queueRow struct {
	*row
	Args       string
	ArgsSHA256 string
	Guarantee  string
	LookupHint string
	ExpiresAt  time.Time
	TimeLeft   string
}

// unknown is GET /console/unknown: each unknown intent with what is known
// of it, and a form to resolve it.
func (h *Handler) unknown(w http.ResponseWriter, r *http.Request, p *principal) {
	rows, err := h.db.inState(r.Context(), p.namespace, outbox.StateUnknown, queueMax+1)
	if err != nil {
		h.renderOutboxError(w, r, p, err)
		return
	}
	v := &queueView{More: len(rows) > queueMax}
	for _, x := range rows[:min(len(rows), queueMax)] {
		q := &queueRow{row: x, Args: redact.JSON(x.Args), LookupHint: lookupHint(x.Effect, x.ProviderKey)}
		if e, ok := h.client.Effects().Get(x.Effect); ok {
			q.Guarantee = string(effects.GuaranteeOf(e, x.Args))
		}
		v.Rows = append(v.Rows, q)
	}
	h.render(w, r, http.StatusOK, "unknown", h.page(p, "Unknown intents", "unknown", v))
}

// approvals is GET /console/approvals: each intent awaiting approval with
// its args in full (what is approved is exactly what is shown: the form
// carries the args_sha256 of these args) and the time left.
func (h *Handler) approvals(w http.ResponseWriter, r *http.Request, p *principal) {
	rows, err := h.db.inState(r.Context(), p.namespace, outbox.StateAwaitingApproval, queueMax+1)
	if err != nil {
		h.renderOutboxError(w, r, p, err)
		return
	}
	v := &queueView{More: len(rows) > queueMax, ApprovalTTL: h.approvalTTL}
	for _, x := range rows[:min(len(rows), queueMax)] {
		q := &queueRow{row: x, ArgsSHA256: outbox.ArgsSHA256(x.Args), ExpiresAt: x.CreatedAt.Add(h.approvalTTL)}
		q.Args = indent(x.Args)
		q.TimeLeft = duration(time.Until(q.ExpiresAt))
		v.Rows = append(v.Rows, q)
	}
	h.render(w, r, http.StatusOK, "approvals", h.page(p, "Awaiting approval", "approvals", v))
}

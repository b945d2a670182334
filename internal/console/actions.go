package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/outbox"
)

// forbidden answers a principal whose role may not make a change.
func (h *Handler) forbidden(w http.ResponseWriter, r *http.Request, p *principal, need access.Role) {
	h.renderError(w, r, p, http.StatusForbidden, outbox.CodeForbidden,
		fmt.Sprintf("This requires the role %s or above; you signed in as %s.", need, p.role))
}

// act is POST /console/intents/{namespace}/{key}/{action}: approve, deny,
// resolve or cancel, through the same outbox.Client calls as the API's,
// recorded as access.ConsoleActor. A success redirects to the intent's page
// (303), so that reloading it repeats nothing.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, p *principal) {
	namespace, key, action := r.PathValue("namespace"), r.PathValue("key"), r.PathValue("action")
	need := access.Action(action)
	switch need {
	case access.ActionApprove, access.ActionDeny, access.ActionResolve, access.ActionCancel:
	default:
		h.renderError(w, r, p, http.StatusNotFound, "not_found", "There is no such action: approve, deny, resolve or cancel.")
		return
	}
	if !access.Allow(p.role, need) {
		h.forbidden(w, r, p, need.Role())
		return
	}
	if !p.sees(namespace) {
		h.renderError(w, r, p, http.StatusNotFound, outbox.CodeNotFound, "no intent with this key")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, formMax)
	if err := r.ParseForm(); err != nil {
		h.renderError(w, r, p, http.StatusBadRequest, outbox.CodeInvalidArgs, "The form could not be read.")
		return
	}
	note, by := strings.TrimSpace(r.PostFormValue("note")), p.actor()
	ctx := r.Context()
	var err error
	done := action + "d"
	switch action {
	case "approve", "deny":
		params := &outbox.ApprovalParams{ArgsSHA256: r.PostFormValue("args_sha256"), By: by, Key: key, Namespace: namespace, Note: note}
		if action == "approve" {
			_, err = h.client.Approve(ctx, params)
		} else {
			done = "denied"
			_, err = h.client.Deny(ctx, params)
		}
	case "resolve":
		_, err = h.client.Resolve(ctx, &outbox.ResolveParams{By: by, Key: key, Namespace: namespace, Note: note,
			Outcome: outbox.Outcome(r.PostFormValue("outcome"))})
	case "cancel":
		done = "cancelled"
		_, err = h.client.Cancel(ctx, &outbox.CancelParams{By: by, Key: key, Namespace: namespace, Note: note})
	}
	if errors.Is(err, outbox.ErrCancelRequested) {
		done, err = "cancel_requested", nil
	}
	if err != nil {
		h.renderOutboxError(w, r, p, err)
		return
	}
	// intentURL builds a path under /console/ from escaped segments: never
	// another site.
	http.Redirect(w, r, intentURL(namespace, key)+"?done="+done, http.StatusSeeOther) //nolint:gosec // see above
}

// bulkView is the bulk cancel's preview and result.
type bulkView struct {
	Filter     filterForm
	Hidden     map[string]string
	Count      int
	More       bool
	Limit      int
	Done       bool
	Cancelled  int
	Refused    []string
	Problem    string
	ListURL    string
	StateNoted bool
}

// bulkPreview is GET /console/bulk/cancel: how many pending intents the
// filter matches (up to BulkLimit; "more" past it), and the form that
// confirms the cancel of exactly that count.
func (h *Handler) bulkPreview(w http.ResponseWriter, r *http.Request, p *principal) {
	if !access.Allow(p.role, access.ActionCancel) {
		h.forbidden(w, r, p, access.ActionCancel.Role())
		return
	}
	form, f, problem := parseFilter(r, p)
	v := &bulkView{Filter: form, Limit: BulkLimit, Problem: problem, ListURL: Prefix + "/intents?" + form.values().Encode(),
		StateNoted: form.State != "" && form.State != string(outbox.StatePending)}
	if problem == "" {
		rows, err := h.db.pendingMatching(r.Context(), f, BulkLimit+1)
		if err != nil {
			h.renderOutboxError(w, r, p, err)
			return
		}
		v.Count, v.More = min(len(rows), BulkLimit), len(rows) > BulkLimit
	}
	v.Hidden = map[string]string{}
	for k, vs := range form.values() {
		if k != "state" {
			v.Hidden[k] = vs[0]
		}
	}
	status := http.StatusOK
	if problem != "" {
		status = http.StatusBadRequest
	}
	h.render(w, r, status, "bulk", h.page(p, "Cancel pending intents", "intents", v))
}

// bulkCancel is POST /console/bulk/cancel: cancels the pending intents
// matching the filter, oldest first, at most BulkLimit, each through
// outbox.Client.Cancel (which refuses one whose attempt may have started).
// The form carries the count the preview showed: if more match now, the
// operator is shown the new count instead, since they confirmed fewer.
func (h *Handler) bulkCancel(w http.ResponseWriter, r *http.Request, p *principal) {
	if !access.Allow(p.role, access.ActionCancel) {
		h.forbidden(w, r, p, access.ActionCancel.Role())
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, formMax)
	if err := r.ParseForm(); err != nil {
		h.renderError(w, r, p, http.StatusBadRequest, outbox.CodeInvalidArgs, "The form could not be read.")
		return
	}
	// The filter travels in the form's body; parseFilter reads a query.
	q := url.Values{}
	for _, name := range []string{"namespace", "effect", "key", "from", "to"} {
		if v := r.PostFormValue(name); v != "" {
			q.Set(name, v)
		}
	}
	r.URL.RawQuery = q.Encode()
	form, f, problem := parseFilter(r, p)
	if problem != "" {
		h.renderError(w, r, p, http.StatusBadRequest, outbox.CodeInvalidArgs, problem)
		return
	}
	confirmed, err := strconv.Atoi(r.PostFormValue("count"))
	if err != nil || confirmed < 0 || confirmed > BulkLimit || r.PostFormValue("confirm") != "yes" {
		h.renderError(w, r, p, http.StatusBadRequest, outbox.CodeInvalidArgs, "Confirm the count the preview showed.")
		return
	}
	rows, err := h.db.pendingMatching(r.Context(), f, BulkLimit)
	if err != nil {
		h.renderOutboxError(w, r, p, err)
		return
	}
	if len(rows) > confirmed {
		http.Redirect(w, r, Prefix+"/bulk/cancel?"+q.Encode(), http.StatusSeeOther)
		return
	}
	note := strings.TrimSpace(r.PostFormValue("note"))
	v := &bulkView{Filter: form, Limit: BulkLimit, Done: true, ListURL: Prefix + "/intents?" + q.Encode()}
	for _, x := range rows {
		_, err := h.client.Cancel(r.Context(), &outbox.CancelParams{By: p.actor(), Key: x.Key, Namespace: x.Namespace, Note: note})
		var oe *outbox.Error
		switch {
		case err == nil:
			v.Cancelled++
		case errors.As(err, &oe):
			v.Refused = append(v.Refused, x.Namespace+"/"+x.Key+": "+oe.Code)
		default:
			h.renderOutboxError(w, r, p, err)
			return
		}
	}
	h.logger.InfoContext(r.Context(), "console bulk cancel", "by", p.actor(), "cancelled", v.Cancelled, "refused", len(v.Refused))
	h.render(w, r, http.StatusOK, "bulk", h.page(p, "Cancel pending intents", "intents", v))
}

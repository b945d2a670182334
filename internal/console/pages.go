package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/redact"
	"github.com/outbox-dev/outbox/outbox"
)

// pageSize is the intents list's page, and queueMax the most intents the
// unknown queue and the approvals page show at once (oldest first).
const (
	pageSize = 50
	queueMax = 200
)

// formMax bounds a posted form: a note is at most 1,000 characters.
const formMax = 64 << 10

// states are the states in the order the pages show them.
var states = outbox.States()

// overviewView is the overview's data.
type overviewView struct {
	*overview
	Effects []effectCounts
	Repairs []repair
	// RepairsKnown is false without a metrics registry.
	RepairsKnown bool
}

type effectCounts struct {
	Effect string
	Counts []int64 // in states' order
	Total  int64
}

// overview is GET /console/.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request, p *principal) {
	o, err := h.db.overview(r.Context(), p.namespace)
	if err != nil {
		h.renderOutboxError(w, r, p, err)
		return
	}
	v := &overviewView{overview: o}
	for effect, counts := range o.ByEffect {
		ec := effectCounts{Effect: effect}
		for _, s := range states {
			ec.Counts = append(ec.Counts, counts[string(s)])
			ec.Total += counts[string(s)]
		}
		v.Effects = append(v.Effects, ec)
	}
	sort.Slice(v.Effects, func(i, j int) bool { return v.Effects[i].Effect < v.Effects[j].Effect })
	v.Repairs, v.RepairsKnown = h.repairs()
	h.render(w, r, http.StatusOK, "overview", h.page(p, "Overview", "overview", v))
}

// counts is GET /console/counts.json, which the overview's script polls:
// the counts by state, and the oldest pending age in seconds.
func (h *Handler) counts(w http.ResponseWriter, r *http.Request, p *principal) {
	o, err := h.db.overview(r.Context(), p.namespace)
	if err != nil {
		h.logger.ErrorContext(r.Context(), "console counts failed", "error", err)
		http.Error(w, `{"error":"internal"}`, http.StatusInternalServerError)
		return
	}
	answer := map[string]any{"states": o.ByState}
	if o.OldestPending != nil {
		answer["oldest_pending"] = duration(*o.OldestPending)
	} else {
		answer["oldest_pending"] = "none pending"
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(answer)
}

// intentsView is the intents list's data.
type intentsView struct {
	Filter     filterForm
	Rows       []*row
	NextURL    string
	FirstURL   string
	BulkURL    string
	Effects    []string
	Namespaced bool
	Problem    string
}

// intents is GET /console/intents: the list, filtered, newest first, a page
// at a time. Each filter is a URL: the form is a GET.
func (h *Handler) intents(w http.ResponseWriter, r *http.Request, p *principal) {
	form, f, problem := parseFilter(r, p)
	v := &intentsView{Filter: form, Effects: h.client.Effects().Names(), Namespaced: p.namespace != "", Problem: problem}
	status := http.StatusOK
	if problem != "" {
		status = http.StatusBadRequest
	} else {
		var before int64
		if c := r.URL.Query().Get("cursor"); c != "" {
			var ok bool
			if before, ok = intentdb.DecodeCursor(c); !ok {
				v.Problem, status = "the cursor is not one this list made; start from the first page", http.StatusBadRequest
			}
		}
		if v.Problem == "" {
			rows, err := h.db.list(r.Context(), f, before, pageSize+1)
			if err != nil {
				h.renderOutboxError(w, r, p, err)
				return
			}
			values := form.values()
			if p.namespace != "" {
				values.Del("namespace")
			}
			if len(rows) > pageSize {
				rows = rows[:pageSize]
				next := url.Values{}
				for k, vs := range values {
					next[k] = vs
				}
				next.Set("cursor", intentdb.EncodeCursor(rows[len(rows)-1].ID))
				v.NextURL = Prefix + "/intents?" + next.Encode()
			}
			if before != 0 {
				v.FirstURL = Prefix + "/intents?" + values.Encode()
			}
			v.BulkURL = Prefix + "/bulk/cancel?" + values.Encode()
			v.Rows = rows
		}
	}
	h.render(w, r, status, "intents", h.page(p, "Intents", "intents", v))
}

// intentView is an intent page's data.
type intentView struct {
	Intent           *outbox.Intent
	Args             string
	Guarantee        string
	LookupHint       string
	ProviderObjectID string
	ResultJSON       string
	// Upstream and UpstreamTool name the MCP upstream and its tool a
	// recorded upstream call went to.
	Upstream     string
	UpstreamTool string
	// SentArgs are the arguments the upstream received from the last
	// attempt that recorded them (the marker and key_arg applied), and
	// SentAttempt that attempt: in full for an operator, who resolves an
	// unknown call by them, redacted as Args for anyone else.
	SentArgs    string
	SentAttempt int
	SentInFull  bool
	Jobs        []*job
	Timeline    []event
	RiverUIPath string
	ExpiresAt   *time.Time
	CanCancel   bool
	// ProviderTask is the task the provider holds the work as (an MCP
	// upstream's): a cancel is then passed to it rather than applied here.
	ProviderTask *intentdb.ProviderTask
	// MCPClient names the MCP client that recorded the intent, and
	// MCPTask its task id (docs/agents.md, "Tasks and approvals in the
	// host"), for an intent recorded over MCP.
	MCPClient string
	MCPTask   string
}

// intent is GET /console/intents/{namespace}/{key}.
func (h *Handler) intent(w http.ResponseWriter, r *http.Request, p *principal) {
	namespace, key := r.PathValue("namespace"), r.PathValue("key")
	if !p.sees(namespace) {
		h.renderError(w, r, p, http.StatusNotFound, outbox.CodeNotFound, "no intent with this key")
		return
	}
	intent, err := h.client.Get(r.Context(), namespace, key)
	if err != nil {
		h.renderOutboxError(w, r, p, err)
		return
	}
	jobs, err := h.db.jobs(r.Context(), intent.ID, intent.JobID)
	if err != nil {
		h.renderOutboxError(w, r, p, err)
		return
	}
	v := &intentView{
		Intent: intent, Args: redact.JSON(intent.Args), Jobs: jobs, RiverUIPath: h.riverUIPath,
		ProviderObjectID: effects.ProviderObjectID(intent.Result),
		CanCancel:        intent.State == outbox.StatePending || intent.State == outbox.StateAwaitingApproval,
	}
	if intent.State == outbox.StateUnknown {
		v.LookupHint = lookupHint(intent.Effect, intent.ProviderKey)
	}
	if len(intent.Result) > 0 {
		v.ResultJSON = redact.JSON(intent.Result)
	}
	if e, ok := h.client.Effects().Get(intent.Effect); ok {
		v.Guarantee = string(effects.GuaranteeOf(e, intent.Args))
		if u, ok := e.(effects.UpstreamTooler); ok {
			v.Upstream, v.UpstreamTool = u.UpstreamName(), u.UpstreamTool()
		}
	}
	if sent, err := h.db.sentArgs(r.Context(), intent.ID); err != nil {
		h.renderOutboxError(w, r, p, err)
		return
	} else if sent != nil {
		v.SentAttempt, v.SentInFull = sent.Attempt, p.role.Allows(access.RoleOperator)
		if v.SentInFull {
			v.SentArgs = indent(sent.Arguments)
		} else {
			v.SentArgs = redact.JSON(sent.Arguments)
		}
	}
	if intent.State == outbox.StatePending || intent.State == outbox.StateRunning {
		pt, err := h.db.providerTask(r.Context(), intent.ID)
		if err != nil {
			h.renderOutboxError(w, r, p, err)
			return
		}
		if pt.Task != "" {
			// The provider has the call: only it can stop the work, once
			// asked (docs/effects.md, "Upstreams that answer with tasks").
			v.ProviderTask = pt
			v.CanCancel = pt.CancelBy == ""
		}
	}
	if intent.State == outbox.StateAwaitingApproval {
		t := intent.CreatedAt.Add(h.approvalTTL)
		v.ExpiresAt = &t
	}
	if intent.RequestedBy != nil && (*intent.RequestedBy == "mcp" || strings.HasPrefix(*intent.RequestedBy, "mcp:")) {
		v.MCPClient = strings.TrimPrefix(strings.TrimPrefix(*intent.RequestedBy, "mcp"), ":")
		if h.taskID != nil {
			// A page without the task id beats no page: the key may be
			// unreadable (OUTBOX_STATE_KEY unset on a replica without the
			// owner's rights).
			if id, err := h.taskID(r.Context(), intent.Namespace, intent.ID); err == nil {
				v.MCPTask = id
			} else {
				h.logger.WarnContext(r.Context(), "console: no MCP task id", "error", err)
			}
		}
	}
	v.Timeline = timeline(intent, jobs)
	h.render(w, r, http.StatusOK, "intent", h.page(p, "Intent "+key, "intents", v))
}

// flashes are the messages a change's redirect names (?done=), so that a
// reload does not repeat the change.
var flashes = map[string]string{
	"approved":         "Approved: the intent is pending and will run.",
	"denied":           "Denied: the intent is cancelled (approval_denied).",
	"resolved":         "Resolved.",
	"cancelled":        "Cancelled.",
	"cancel_requested": "Cancel passed to the provider, which holds the work as a task: the intent ends by what it reports.",
}

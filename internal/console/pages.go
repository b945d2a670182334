package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-dev/outbox/effects"
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
var states = []outbox.State{
	outbox.StateAwaitingApproval, outbox.StatePending, outbox.StateRunning,
	outbox.StateSucceeded, outbox.StateFailed, outbox.StateUnknown, outbox.StateCancelled,
}

// intentURL is the intent page's path. A key is one path segment, escaped;
// "." and ".." are escaped whole, since a router would clean them away.
func intentURL(namespace, key string) string {
	return Prefix + "/intents/" + pathSegment(namespace) + "/" + pathSegment(key)
}

func pathSegment(s string) string {
	if strings.Trim(s, ".") == "" {
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}

var funcs = template.FuncMap{
	"intentURL": intentURL,
	"time": func(t any) string {
		switch t := t.(type) {
		case time.Time:
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		case *time.Time:
			if t == nil {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return fmt.Sprint(t)
	},
	"iso":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago":      func(t time.Time) string { return duration(time.Since(t)) + " ago" },
	"duration": duration,
	"durationp": func(d *time.Duration) string {
		if d == nil {
			return ""
		}
		return duration(*d)
	},
	"states": func() []string {
		out := make([]string, len(states))
		for i, s := range states {
			out[i] = string(s)
		}
		return out
	},
	"stateLabel": func(s any) string { return strings.ReplaceAll(fmt.Sprint(s), "_", " ") },
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"riverJob": func(prefix string, id int64) string { return prefix + "/jobs/" + strconv.FormatInt(id, 10) },
}

// duration is d rounded for a person: "3h 12m", "4m 05s", "12s".
func duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

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

type repair struct {
	Reason string
	Count  float64
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

// repairs reads outbox_reconciled_total from the process's registry: the
// reconciler's repairs by reason since this process started (on River's
// leader; another replica may be the one repairing).
func (h *Handler) repairs() ([]repair, bool) {
	if h.metrics == nil {
		return nil, false
	}
	families, err := h.metrics.Gather()
	if err != nil {
		return nil, false
	}
	var out []repair
	for _, f := range families {
		if f.GetName() != "outbox_reconciled_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out = append(out, repair{Reason: label(m, "reason"), Count: m.GetCounter().GetValue()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Reason < out[j].Reason })
	return out, out != nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
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

// filterForm is the intents filter as the form shows it: the query's
// values as given.
type filterForm struct {
	Namespace, State, Effect, Key, From, To string
}

func (f filterForm) values() url.Values {
	v := url.Values{}
	for name, value := range map[string]string{"namespace": f.Namespace, "state": f.State, "effect": f.Effect, "key": f.Key, "from": f.From, "to": f.To} {
		if value != "" {
			v.Set(name, value)
		}
	}
	return v
}

// dateLayouts are the "created between" fields' forms: what an
// <input type="datetime-local"> sends, with or without seconds, a date
// alone, and RFC 3339. A time without a zone is UTC, as the pages show
// times.
var dateLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02", time.RFC3339}

func parseTime(s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range dateLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return &t, nil
		}
	}
	return nil, fmt.Errorf("%q is not a time such as 2025-06-01T09:30 (UTC)", s)
}

// parseFilter reads the intents filter from r's query, within what p
// sees.
func parseFilter(r *http.Request, p *principal) (filterForm, *filter, string) {
	q := r.URL.Query()
	form := filterForm{
		Namespace: strings.TrimSpace(q.Get("namespace")), State: q.Get("state"), Effect: strings.TrimSpace(q.Get("effect")),
		Key: q.Get("key"), From: q.Get("from"), To: q.Get("to"),
	}
	f := &filter{Namespace: form.Namespace, Effect: form.Effect, KeyPrefix: form.Key}
	if p.namespace != "" {
		// A token sees its namespace only, whatever the query says.
		form.Namespace, f.Namespace = p.namespace, p.namespace
	}
	var problems []string
	if form.State != "" {
		if !outbox.State(form.State).Valid() {
			problems = append(problems, fmt.Sprintf("%q is not a state", form.State))
		} else {
			f.States = []string{form.State}
		}
	}
	var err error
	if f.CreatedAfter, err = parseTime(form.From); err != nil {
		problems = append(problems, "created from: "+err.Error())
	}
	if f.CreatedBefore, err = parseTime(form.To); err != nil {
		problems = append(problems, "created before: "+err.Error())
	}
	return form, f, strings.Join(problems, "; ")
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
	Jobs         []*job
	Timeline     []event
	RiverUIPath  string
	ExpiresAt    *time.Time
	CanCancel    bool
}

// event is one line of an intent's timeline.
type event struct {
	At     time.Time
	What   string
	Detail string
	JobID  int64
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
		ProviderObjectID: providerObjectID(intent.Result),
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
		if u, ok := e.(interface {
			UpstreamName() string
			UpstreamTool() string
		}); ok {
			v.Upstream, v.UpstreamTool = u.UpstreamName(), u.UpstreamTool()
		}
	}
	if intent.State == outbox.StateAwaitingApproval {
		t := intent.CreatedAt.Add(h.approvalTTL)
		v.ExpiresAt = &t
	}
	v.Timeline = timeline(intent, jobs)
	h.render(w, r, http.StatusOK, "intent", h.page(p, "Intent "+key, "intents", v))
}

// timeline is what can be told of an intent's story from its row and its
// River jobs: the row keeps only the latest attempt's outcome, River each
// job's attempts and their errors.
func timeline(in *outbox.Intent, jobs []*job) []event {
	by := func(s *string) string {
		if s == nil {
			return ""
		}
		return "by " + *s
	}
	note := func(s *string) string {
		if s == nil || *s == "" {
			return ""
		}
		return "note: " + *s
	}
	join := func(parts ...string) string {
		var kept []string
		for _, p := range parts {
			if p != "" {
				kept = append(kept, p)
			}
		}
		return strings.Join(kept, "; ")
	}
	created := join(by(in.EnqueuedBy), "key source "+string(in.KeySource))
	if in.RequestedBy != nil {
		created = join(created, "requested by "+*in.RequestedBy)
	}
	ev := []event{{At: in.CreatedAt, What: "enqueued", Detail: created}}
	if in.ApprovalRule != nil {
		ev = append(ev, event{At: in.CreatedAt, What: "held for approval", Detail: "rule " + *in.ApprovalRule})
	}
	if in.ApprovedAt != nil {
		ev = append(ev, event{At: *in.ApprovedAt, What: "approved", Detail: join(by(in.ApprovedBy), note(in.ApprovalNote))})
	}
	if in.DeniedAt != nil {
		ev = append(ev, event{At: *in.DeniedAt, What: "denied", Detail: join(by(in.DeniedBy), note(in.ApprovalNote))})
	}
	for _, j := range jobs {
		ev = append(ev, event{At: j.CreatedAt, What: "River job created", Detail: j.Kind, JobID: j.ID})
		for _, e := range j.Errors {
			ev = append(ev, event{At: e.At, What: fmt.Sprintf("River attempt %d returned an error", e.Attempt), Detail: e.Error, JobID: j.ID})
		}
		if j.AttemptedAt != nil {
			ev = append(ev, event{At: *j.AttemptedAt, What: fmt.Sprintf("River attempt %d started", j.Attempt), JobID: j.ID})
		}
		if j.FinalizedAt != nil {
			ev = append(ev, event{At: *j.FinalizedAt, What: "River job " + j.State, Detail: outputSummary(j.Output), JobID: j.ID})
		}
	}
	if in.ResolvedAt != nil {
		what := "resolved"
		if in.State == outbox.StateCancelled {
			what = "cancelled"
		}
		ev = append(ev, event{At: *in.ResolvedAt, What: what, Detail: join(by(in.ResolvedBy), note(in.ResolutionNote))})
	}
	if in.CompletedAt != nil {
		// An intent resolved as succeeded keeps the error of the attempt
		// that left it unknown; the end names an error only when it is
		// the outcome.
		detail := ""
		if in.Error != nil && in.State != outbox.StateSucceeded {
			detail = in.Error.Code + ": " + in.Error.Message
		}
		ev = append(ev, event{At: *in.CompletedAt, What: "ended " + strings.ReplaceAll(string(in.State), "_", " "), Detail: detail})
	} else {
		ev = append(ev, event{At: in.UpdatedAt, What: "last change: now " + strings.ReplaceAll(string(in.State), "_", " "),
			Detail: fmt.Sprintf("%d attempts so far", in.Attempts)})
	}
	slices.SortStableFunc(ev, func(a, b event) int { return a.At.Compare(b.At) })
	return ev
}

// outputSummary is an attempt's recorded output in a line: the state it
// left the intent in, its error code and attempt number.
func outputSummary(out json.RawMessage) string {
	var o struct {
		Attempt          int    `json:"attempt"`
		ErrorCode        string `json:"error_code"`
		HandOverReason   string `json:"hand_over_reason"`
		HandedOverTo     int64  `json:"handed_over_to"`
		ProviderObjectID string `json:"provider_object_id"`
		State            string `json:"state"`
	}
	if len(out) == 0 || json.Unmarshal(out, &o) != nil {
		return ""
	}
	parts := []string{"intent " + o.State}
	if o.Attempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt %d", o.Attempt))
	}
	if o.ErrorCode != "" {
		parts = append(parts, "error "+o.ErrorCode)
	}
	if o.HandedOverTo != 0 {
		parts = append(parts, fmt.Sprintf("handed over to job %d (%s)", o.HandedOverTo, o.HandOverReason))
	}
	if o.ProviderObjectID != "" {
		parts = append(parts, "provider object "+o.ProviderObjectID)
	}
	return strings.Join(parts, ", ")
}

// providerObjectID picks the provider's object id out of a result, as the
// workers record it in River's output: its top-level "id", or else the
// first top-level field ending in "_id".
func providerObjectID(result json.RawMessage) string {
	var fields map[string]json.RawMessage
	if len(result) == 0 || json.Unmarshal(result, &fields) != nil {
		return ""
	}
	keys := []string{"id"}
	var more []string
	for k := range fields {
		if strings.HasSuffix(k, "_id") {
			more = append(more, k)
		}
	}
	slices.Sort(more)
	for _, k := range append(keys, more...) {
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

// lookupHint says where to look for the provider's object of the built-in
// effects, from the provider key they send: what an operator checks before
// resolving an unknown intent. Other effects get none.
func lookupHint(effect, providerKey string) string {
	switch effect {
	case "charge":
		return "Stripe dashboard or API: the PaymentIntent created with Idempotency-Key " + providerKey + " (Stripe keeps keys for 24 hours; search payments by customer and amount after)."
	case "email":
		return "the mail server's log or the recipient's mailbox: the message whose Message-ID starts with " + providerKey + "@."
	case "ticket":
		return "Zendesk: the ticket whose external_id is " + providerKey + "."
	case "webhook":
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

// indent is a JSON document indented, numbers as written.
func indent(doc json.RawMessage) string {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return string(doc)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(doc)
	}
	return string(out)
}

// flashes are the messages a change's redirect names (?done=), so that a
// reload does not repeat the change.
var flashes = map[string]string{
	"approved":  "Approved: the intent is pending and will run.",
	"denied":    "Denied: the intent is cancelled (approval_denied).",
	"resolved":  "Resolved.",
	"cancelled": "Cancelled.",
}

package console

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/outbox"
)

// event is one line of an intent's timeline.
type event struct {
	At     time.Time
	What   string
	Detail string
	JobID  int64
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

// outputSummary is a job's recorded output (workers.AttemptOutput, or a
// batch's entry for the intent, workers.BatchIntentOutput) in a line: the
// state it left the intent in, the attempt number, the error code, the job
// a batch handed the intent over to, and the provider's object id.
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

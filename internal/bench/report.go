package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Report is a run's figures as outboxd bench prints them: as JSON (its
// fields) or as a table (WriteTable).
type Report struct {
	// Lanes are the lanes measured, plain River first.
	Lanes []ReportLane `json:"lanes"`
	// OfferedRate is the paced runs' rate: half of plain River's maximum.
	OfferedRate float64 `json:"offered_rate_per_s"`
	// Batch are the batch lanes, 1,000 rows a transaction.
	Batch *BatchComparison `json:"batch"`
	// BatchRatio is Batch.Ratio().
	BatchRatio float64 `json:"batch_ratio"`
	// Targets are docs/design.md's performance targets, as measured.
	Targets []Target `json:"targets"`
}

// ReportLane is one lane of a Report.
type ReportLane struct {
	// Name is the lane's name, as --lane takes it.
	Name string `json:"name"`
	// Max is the lane's run at its maximum rate.
	Max *Result `json:"max"`
	// Paced is the lane's run at Report.OfferedRate.
	Paced *Result `json:"paced"`
	// Ratio is the lane's maximum rate over plain River's.
	Ratio float64 `json:"ratio"`
	// RatioLikeForLike is the lane's maximum rate over that of River's
	// lane that inserts the same way (in a caller's transaction or not).
	RatioLikeForLike float64 `json:"ratio_like_for_like"`
	// RatioToHandWritten is the lane's maximum rate over the hand-written
	// outbox's.
	RatioToHandWritten float64 `json:"ratio_to_hand_written"`
	// Cost is what an action of the lane cost the database at its maximum
	// rate (Max.Cost): WAL bytes, index entries and the HOT share of its
	// updates.
	Cost *Cost `json:"cost"`
}

// Target is one of docs/design.md's performance targets and whether a run
// met it.
type Target struct {
	// Name says what is compared, with the target's letter.
	Name string `json:"name"`
	// Value is what the run measured.
	Value float64 `json:"value"`
	// Bound is the target: at least Bound, or at most when AtMost.
	Bound float64 `json:"bound"`
	// AtMost makes Bound an upper bound.
	AtMost bool `json:"at_most,omitempty"`
	// Met is whether Value is within Bound.
	Met bool `json:"met"`
}

// Targets checks docs/design.md section 5's targets against a run: only
// those whose lanes ran.
func Targets(c *Comparison, batch *BatchComparison) []Target {
	lane := func(name string) int {
		for i, k := range c.Kinds {
			if k.Name == name {
				return i
			}
		}
		return -1
	}
	out, noTx, river := lane(LaneOutbox), lane(LaneOutboxNoCallerTx), lane(LaneRiverInsertTx)
	var targets []Target
	add := func(name string, value, bound float64, atMost bool) {
		met := value >= bound
		if atMost {
			met = value <= bound
		}
		targets = append(targets, Target{Name: name, Value: value, Bound: bound, AtMost: atMost, Met: met})
	}
	if noTx >= 0 {
		add("(a) outbox (no caller tx) over river Insert (no caller tx)", c.RatioLikeForLike(noTx), 1.2, false)
	}
	if out >= 0 {
		add("(b) outbox over river InsertTx", c.RatioLikeForLike(out), 1.2, false)
		if c.RatioTo(out, LaneHandWritten) > 0 {
			add("(c) outbox over the hand-written outbox on River", c.RatioTo(out, LaneHandWritten), 1.5, false)
		}
		if river >= 0 && c.Paced[river].P99 > 0 {
			add("(d) outbox's p99 commit-to-terminal at half River's maximum over River's", float64(c.Paced[out].P99)/float64(c.Paced[river].P99), 1.0, true)
			add("(f) outbox's p50 commit-to-terminal at half River's maximum, ms", ms(c.Paced[out].P50), 50, true)
		}
		if wm := lane(LaneWatermill); wm >= 0 {
			add("(g) outbox over watermill-sql", c.RatioTo(out, LaneWatermill), 1.0, false)
			if w := c.Max[wm].Cost; w != nil && w.WALBytesPerAction > 0 && c.Max[out].Cost != nil {
				add("(h) outbox's WAL per intent over watermill-sql's per message", c.Max[out].Cost.WALBytesPerAction/w.WALBytesPerAction, 2.0, true)
			}
		}
		if river >= 0 && c.Max[river].Cost != nil && c.Max[river].Cost.WALBytesPerAction > 0 && c.Max[out].Cost != nil {
			add("(i) outbox's WAL per intent over River's per job", c.Max[out].Cost.WALBytesPerAction/c.Max[river].Cost.WALBytesPerAction, 0.5, true)
		}
	}
	add("(e) EnqueueManyTx over InsertManyTx (1,000 a transaction)", batch.Ratio(), 1.0, false)
	maxRSS := int64(0)
	for _, r := range c.Max {
		maxRSS = max(maxRSS, r.PeakRSS)
	}
	add("peak RSS of the bench process, MB (serve alone is less: docs/design.md)", float64(maxRSS)/(1<<20), 64, true)
	return targets
}

// NewReport is the report of a run: the lanes of c and the batch lanes.
func NewReport(c *Comparison, batch *BatchComparison) *Report {
	report := &Report{OfferedRate: c.OfferedRate, Batch: batch, BatchRatio: batch.Ratio(), Targets: Targets(c, batch)}
	for i, k := range c.Kinds {
		report.Lanes = append(report.Lanes, ReportLane{Name: k.Name, Max: c.Max[i], Paced: c.Paced[i], Ratio: c.Ratio(i),
			RatioLikeForLike: c.RatioLikeForLike(i), RatioToHandWritten: c.RatioTo(i, LaneHandWritten), Cost: c.Max[i].Cost})
	}
	return report
}

// WriteTable writes the report as outboxd bench prints it without --json:
// a table of the lanes, what its columns mean, and the targets.
func (report *Report) WriteTable(w io.Writer) error {
	batch := report.Batch
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "lane\tmax rate/s\tx plain River\tlike for like\tx hand-written\tp50 ms\tp99 ms\tjob p99 ms\tpeak RSS MB\tWAL B/action\tindex tuples/action\tHOT updates\tHOT, intents\t\n")
	for _, l := range report.Lanes {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t\n", l.Name, l.Max.Rate, l.Ratio, l.RatioLikeForLike, l.RatioToHandWritten,
			ms(l.Paced.P50), ms(l.Paced.P99), ms(l.Paced.JobP99), float64(l.Max.PeakRSS)/(1<<20), costColumns(l.Cost))
	}
	fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%s\t\n", batch.River.Name+" (1,000/tx)", batch.River.Rate, "-", 1.0, "-", "-", "-", "-", float64(batch.River.PeakRSS)/(1<<20), costColumns(batch.River.Cost))
	fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%s\t\n", batch.Outbox.Name+" (1,000/tx)", batch.Outbox.Rate, "-", batch.Ratio(), "-", "-", "-", "-", float64(batch.Outbox.PeakRSS)/(1<<20), costColumns(batch.Outbox.Cost))
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\np50 and p99: commit to terminal, at %.0f units/s (half of plain River's maximum): River's job completed,\n"+
		"or outbox's intent terminal; job p99: commit to the River job completed (after the intent, for outbox).\n"+
		"Like for like: against River's lane that inserts the same way (in a caller's transaction or without one).\n"+
		"WAL, index tuples and HOT updates: per action at the maximum rate; WAL is the server's (anything else running counts),\n"+
		"index tuples one per index for each insert and non-HOT update of the lane's tables (an upper bound with partial indexes).\n"+
		"Batch rows: inserts only, 1,000 a transaction; their ratio is against River's InsertManyTx.\n\nTargets (docs/design.md, section 5):\n", report.OfferedRate); err != nil {
		return err
	}
	for _, t := range report.Targets {
		op, verdict := ">=", "met"
		if t.AtMost {
			op = "<="
		}
		if !t.Met {
			verdict = "NOT met"
		}
		if _, err := fmt.Fprintf(w, "  %-78s %6.2f (%s %.2f) %s\n", t.Name, t.Value, op, t.Bound, verdict); err != nil {
			return err
		}
	}
	return nil
}

// costColumns is a lane's cost as the table's last four columns: the
// last, the HOT share of the intent table's own updates.
func costColumns(c *Cost) string {
	if c == nil {
		return "-\t-\t-\t-"
	}
	share := func(updates, hot float64) string {
		if updates == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*hot)
	}
	intents := "-"
	if t := c.Tables["outbox_intent"]; t != nil {
		intents = share(t.UpdatesPerAction, t.HOTUpdateShare)
	}
	return fmt.Sprintf("%.0f\t%.1f\t%s\t%s", c.WALBytesPerAction, c.IndexTuplesPerAction, share(c.UpdatesPerAction, c.HOTUpdateShare), intents)
}

package console

import (
	"sort"

	dto "github.com/prometheus/client_model/go"
)

type repair struct {
	Reason string
	Count  float64
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

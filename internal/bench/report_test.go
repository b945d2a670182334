package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReport builds a report from made-up figures, without a database: the
// lanes keep their order and ratios, each target is met or not by its
// bound, and the table names every lane and every target.
func TestReport(t *testing.T) {
	t.Parallel()

	c := &Comparison{Kinds: Kinds, OfferedRate: 500}
	for _, k := range Kinds {
		rate, wal := 1000.0, 1000.0
		switch k.Name {
		case LaneOutbox:
			rate = 1500 // 1.5 x River's InsertTx: target (b) met
			wal = 400   // 0.4 x River's: target (i) met
		case LaneOutboxNoCallerTx:
			rate = 1100 // 1.1 x River's Insert: target (a) not met
		}
		c.Max = append(c.Max, &Result{Name: k.Name, Count: 100, Rate: rate, PeakRSS: 32 << 20,
			Cost: &Cost{WALBytesPerAction: wal}})
		c.Paced = append(c.Paced, &Result{Name: k.Name, P50: 10 * time.Millisecond, P99: 20 * time.Millisecond})
	}
	batch := &BatchComparison{River: &Result{Name: "river InsertManyTx", Rate: 10_000}, Outbox: &Result{Name: "outbox EnqueueManyTx", Rate: 12_000}}

	report := NewReport(c, batch)
	require.Len(t, report.Lanes, len(Kinds))
	require.Equal(t, Kinds[0].Name, report.Lanes[0].Name)
	require.InDelta(t, 1.2, report.BatchRatio, 1e-9)
	met := map[string]bool{}
	for _, target := range report.Targets {
		met[target.Name[:3]] = target.Met
	}
	require.True(t, met["(b)"], "outbox over river InsertTx: 1.5 >= 1.2")
	require.False(t, met["(a)"], "outbox (no caller tx) over river Insert: 1.1 < 1.2")
	require.True(t, met["(e)"], "EnqueueManyTx over InsertManyTx: 1.2 >= 1.0")
	require.Len(t, report.Targets, 10, "targets (a) to (i) and the RSS")

	var buf bytes.Buffer
	require.NoError(t, report.WriteTable(&buf))
	out := buf.String()
	for _, k := range Kinds {
		require.Contains(t, out, k.Name)
	}
	require.Contains(t, out, "outbox EnqueueManyTx (1,000/tx)")
	require.Contains(t, out, "at 500 units/s")
	for _, target := range report.Targets {
		require.Contains(t, out, target.Name)
	}
	require.Equal(t, 1, strings.Count(out, "NOT met"), out)
}

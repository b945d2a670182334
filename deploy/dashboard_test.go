package deploy_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Panels []dashboardPanel `json:"panels"`
	UID    string           `json:"uid"`
}

type dashboardPanel struct {
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Title string `json:"title"`
	Type  string `json:"type"`
}

// grafanaRanges are Grafana's range variables, which PromQL does not know:
// the test puts a duration in their place before parsing.
var grafanaRanges = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// selectedMetrics parses expr as PromQL and returns the metric names its
// selectors name.
func selectedMetrics(t *testing.T, expr string) []string {
	t.Helper()
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaRanges.Replace(expr))
	require.NoError(t, err, expr)
	var names []string
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			// A selector without a name (`{__name__=~"..."}`) would
			// escape the check: the dashboard names every metric.
			require.NotEmpty(t, vs.Name, "selector without a metric name in %q", expr)
			names = append(names, vs.Name)
		}
		return nil
	})
	require.NotEmpty(t, names, "no metric in %q", expr)
	return names
}

// TestDashboard parses every panel's PromQL in deploy/grafana/outbox.json and
// checks that each metric it names is exported by a real serve's /metrics.
func TestDashboard(t *testing.T) {
	t.Parallel()

	raw, err := os.ReadFile("grafana/outbox.json")
	require.NoError(t, err)
	var dash dashboard
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.Equal(t, "outbox", dash.UID)

	// Every panel's metrics, by the panel that names them.
	used := map[string][]string{}
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
			for _, target := range p.Targets {
				for _, name := range selectedMetrics(t, target.Expr) {
					used[name] = append(used[name], p.Title)
				}
			}
		}
	}
	walk(dash.Panels)

	// What the dashboard must show (docs/operations.md, "The dashboard").
	for _, name := range []string{
		"outbox_intents", "outbox_intents_enqueued_total", "outbox_effect_attempts_total",
		"outbox_intents_deduplicated_total", "outbox_idempotency_conflicts_total",
		"outbox_effect_duration_seconds_bucket", "outbox_unknown_intents",
		"outbox_oldest_pending_intent_age_seconds", "outbox_reconciled_total",
		"outbox_stale_writes_total", "outbox_http_auth_failures_total",
	} {
		require.Contains(t, used, name, "the dashboard shows no %s", name)
	}

	serve := startServe(t)
	serve.exercise(t)
	exported := serve.metricNames(t)
	var missing []string
	for name, panels := range used {
		if !exported[name] {
			missing = append(missing, name+" (panels "+strings.Join(slices.Compact(panels), ", ")+")")
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "metrics the dashboard names and serve does not export")
}

package deploy_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v4"
)

// promtool finds promtool, from Debian's prometheus package (.ci/run installs
// it). Without it the test skips on a developer's machine, and fails in CI,
// where a skipped check would pass unseen.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is missing: apt-get install prometheus (.ci/run does)")
		}
		t.Skip("promtool is missing: apt-get install prometheus to check the alert rules")
	}
	return path
}

// alertRules is the part of a Prometheus rule file the test reads.
type alertRules struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Annotations map[string]string `yaml:"annotations"`
			Expr        string            `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// ruleTests is the part of a promtool test file the test reads.
type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			AlertName string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		Name string `yaml:"name"`
	} `yaml:"tests"`
}

// TestAlertRules checks deploy/prometheus: promtool accepts the rules and
// passes their unit tests, every alert has a test in which it fires and one
// in which it stays quiet, a runbook line in docs/operations.md, and names
// only metrics a real serve exports.
func TestAlertRules(t *testing.T) {
	t.Parallel()

	var rules alertRules
	raw, err := os.ReadFile("prometheus/alerts.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	var tests ruleTests
	raw, err = os.ReadFile("prometheus/alerts_test.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &tests))
	docs, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	_, runbook, found := strings.Cut(string(docs), "\n### Runbook\n")
	require.True(t, found, `docs/operations.md has no "### Runbook"`)
	runbook, _, _ = strings.Cut(runbook, "\n#")

	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, test := range tests.Tests {
		for _, rt := range test.AlertRuleTest {
			if len(rt.ExpAlerts) > 0 {
				fires[rt.AlertName] = true
			} else {
				quiet[rt.AlertName] = true
			}
		}
	}
	used := map[string][]string{}
	var alerts []string
	for _, group := range rules.Groups {
		for _, rule := range group.Rules {
			require.NotEmpty(t, rule.Alert, "a recording rule in alerts.yaml: %q", rule.Expr)
			alerts = append(alerts, rule.Alert)
			require.True(t, fires[rule.Alert], "no test in which %s fires", rule.Alert)
			require.True(t, quiet[rule.Alert], "no test in which %s stays quiet", rule.Alert)
			require.Regexp(t, regexp.MustCompile("(?m)^\\| `"+rule.Alert+"` \\|"), runbook, "no runbook line for %s", rule.Alert)
			require.Contains(t, rule.Annotations["runbook_url"], "docs/operations.md#runbook", rule.Alert)
			for _, name := range selectedMetrics(t, rule.Expr) {
				used[name] = append(used[name], rule.Alert)
			}
		}
	}
	// The alerts docs/operations.md lists ("Alerts").
	for _, want := range []string{
		"OutboxUnknownIntents", "OutboxPendingTooOld", "OutboxApprovalNearExpiry", "OutboxReconcilerRepairs",
		"OutboxStaleWrites", "OutboxEffectFailureRatio", "OutboxNoLeader", "OutboxDrainStalled",
	} {
		require.Contains(t, alerts, want)
	}

	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}

	serve := startServe(t)
	serve.exercise(t)
	exported := serve.metricNames(t)
	var missing []string
	for name, alerts := range used {
		// up is Prometheus's own, for the scrape.
		if name != "up" && !exported[name] {
			missing = append(missing, name+" ("+strings.Join(slices.Compact(alerts), ", ")+")")
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "metrics the alerts name and serve does not export")
}

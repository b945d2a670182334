package metrics

import "github.com/prometheus/client_golang/prometheus"

// Effects are the counters of the effects a process runs that their own
// code cannot export: outcome rules of declared effects that failed to
// evaluate, and MCP upstream calls and drift. internal/effectset counts
// into them; serve registers them on its /metrics (Collectors). Safe for
// concurrent use.
type Effects struct {
	// DeclaredRuleErrors is outbox_declared_rule_errors_total{effect}:
	// outcome rules of declared effects whose evaluation failed (and so
	// did not match).
	DeclaredRuleErrors *prometheus.CounterVec

	// UpstreamCalls is outbox_upstream_calls_total{upstream,tool,outcome}:
	// calls of MCP upstream tools, recorded and pass-through.
	UpstreamCalls *prometheus.CounterVec

	// UpstreamDrift is outbox_upstream_drift_total{upstream,tool}: upstream
	// tools found to differ from their pin, and so withdrawn.
	UpstreamDrift *prometheus.CounterVec

	// UpstreamLockMismatch is outbox_upstream_lock_mismatch{upstream}: 1
	// while this replica's lock of an upstream differs from the one the
	// replicas recorded, and so it does not work the upstream's queue.
	UpstreamLockMismatch *prometheus.GaugeVec
}

// NewEffects returns the counters, each at no series until counted.
func NewEffects() *Effects {
	return &Effects{
		DeclaredRuleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_declared_rule_errors_total",
			Help: "Outcome rules of declared effects (OUTBOX_EFFECTS_FILE) whose CEL evaluation failed, and so did not match.",
		}, []string{"effect"}),
		UpstreamCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_upstream_calls_total",
			Help: "Calls of MCP upstream tools (OUTBOX_EFFECTS_FILE upstreams), recorded and pass-through, by outcome.",
		}, []string{"upstream", "tool", "outcome"}),
		UpstreamDrift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_upstream_drift_total",
			Help: "MCP upstream tools found to differ from their pin (or missing), and so withdrawn until pinned again.",
		}, []string{"upstream", "tool"}),
		UpstreamLockMismatch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_upstream_lock_mismatch",
			Help: "1 while this replica's lock of an MCP upstream differs from the one the last started replica recorded: it does not work the upstream's queue until restarted with that lock.",
		}, []string{"upstream"}),
	}
}

// Collectors returns the counters, to register on a registry.
func (e *Effects) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.DeclaredRuleErrors, e.UpstreamCalls, e.UpstreamDrift, e.UpstreamLockMismatch}
}

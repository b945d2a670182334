package workers

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of outbox_reconciled_total: what had become of the job of an
// intent that was not terminal.
const (
	ReconcileReasonJobCancelled = "job_cancelled"
	ReconcileReasonJobCompleted = "job_completed"
	ReconcileReasonJobDiscarded = "job_discarded"
	ReconcileReasonJobMissing   = "job_missing"
)

// Metrics are the workers' Prometheus metrics. One Metrics may be shared by
// every worker of a process.
type Metrics struct {
	// Approvals is outbox_approvals_total{decision}: approved, denied (by
	// an operator, counted by the process that recorded it) or expired.
	Approvals *prometheus.CounterVec
	// Drained is outbox_intents_drained_total: intents this process's drain
	// took from the table and handed to River (or failed at validation). It
	// is the drain's heartbeat for alerting: intents coming in while no
	// replica drains any means the drain is stuck.
	Drained prometheus.Counter
	// EffectAttempts is outbox_effect_attempts_total{effect,outcome}, outcome
	// being succeeded, failed, not_sent, ambiguous, unknown or stale.
	EffectAttempts *prometheus.CounterVec
	// EffectDuration is outbox_effect_duration_seconds{effect}.
	EffectDuration *prometheus.HistogramVec
	// Reconciled is outbox_reconciled_total{reason}: intents the reconciler
	// gave a fresh job, by what had become of their job.
	Reconciled *prometheus.CounterVec
	// Rescued is outbox_jobs_rescued_total: running River jobs of processes
	// that died, made available again by this process's heartbeat
	// (dispatcher.Config.HeartbeatInterval), each a crash's attempt that
	// runs again within seconds.
	Rescued prometheus.Counter
	// StaleWrites is outbox_stale_writes_total: fenced writes rejected
	// because another attempt had taken the intent over.
	StaleWrites prometheus.Counter
}

// EffectDurationBuckets returns outbox_effect_duration_seconds's bounds: 5
// ms to 60 s in 1-2.5-5 steps, bounds a person reads at a glance, ending at
// twice the default effect timeout (30 s). Each call returns a new slice.
func EffectDurationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60}
}

// NewMetrics creates the workers' metrics and registers them with reg (none
// when reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_approvals_total",
			Help: "Decisions on intents awaiting approval: approved, denied, or expired unanswered.",
		}, []string{"decision"}),
		Drained: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_intents_drained_total",
			Help: "Intents this process's drain handed to River in committed drains.",
		}),
		EffectAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_effect_attempts_total",
			Help: "Attempts at an effect, by effect and outcome.",
		}, []string{"effect", "outcome"}),
		EffectDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_effect_duration_seconds",
			Help:    "Duration of one effect call (provider round trip), by effect.",
			Buckets: EffectDurationBuckets(),
		}, []string{"effect"}),
		Reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_reconciled_total",
			Help: "Non-terminal intents whose River job was finished or gone, given a fresh job, by what had become of the job.",
		}, []string{"reason"}),
		Rescued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_jobs_rescued_total",
			Help: "Running River jobs of dead processes that this process made available again.",
		}),
		StaleWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_stale_writes_total",
			Help: "Outcome writes rejected because another attempt had taken the intent over (fencing).",
		}),
	}
	// Every reason is present from the start, so that a rate over it is
	// defined before the first repair.
	for _, reason := range []string{ReconcileReasonJobCancelled, ReconcileReasonJobCompleted, ReconcileReasonJobDiscarded, ReconcileReasonJobMissing} {
		m.Reconciled.WithLabelValues(reason)
	}
	for _, decision := range []string{"approved", "denied", "expired"} {
		m.Approvals.WithLabelValues(decision)
	}
	if reg != nil {
		reg.MustRegister(m.Approvals, m.Drained, m.EffectAttempts, m.EffectDuration, m.Reconciled, m.Rescued, m.StaleWrites)
	}
	return m
}

// Package metrics exposes outbox's Prometheus metrics that are not counted by
// the workers: gauges read from the database, and enqueue counters.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
)

// RefreshIntervalDefault is how often the database gauges are refreshed.
const RefreshIntervalDefault = 15 * time.Second

// states are every state, so that a state with no intent reads 0 rather than
// disappearing from the scrape.
var states = outbox.States()

// GaugesConfig configures Gauges.
type GaugesConfig struct {
	// ClientIDFunc, when set, returns this process's River client ID (empty
	// until the client exists), and outbox_leader is exported: 1 while
	// River's leader row names that client. A func rather than a string:
	// the gauges start before the dispatcher that owns the client. Defaults
	// to nil: no outbox_leader.
	ClientIDFunc func() string
	// Logger receives refresh failures. Defaults to a logger that discards.
	Logger *slog.Logger
	// RefreshInterval is how often the gauges are read from the database.
	// Defaults to RefreshIntervalDefault.
	RefreshInterval time.Duration
	// Schema holds the outbox tables. Defaults to "outbox".
	Schema string
}

// Gauges are outbox_intents{state}, outbox_oldest_pending_intent_age_seconds,
// outbox_oldest_awaiting_approval_age_seconds, outbox_unknown_intents and, with a ClientIDFunc, outbox_leader. They are
// refreshed on an interval (one query, and one more for the leader), not per
// scrape: a scrape must not cost a table scan, and several Prometheus servers
// scraping several replicas would multiply it.
type Gauges struct {
	clientIDFunc           func() string
	intents                *prometheus.GaugeVec
	leader                 prometheus.Gauge
	logger                 *slog.Logger
	oldestAwaitingApproval prometheus.Gauge
	oldestPending          prometheus.Gauge
	pool                   *pgxpool.Pool
	interval               time.Duration
	queries                *intentdb.Queries
	unknown                prometheus.Gauge

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewGauges creates the gauges and registers them with reg.
func NewGauges(pool *pgxpool.Pool, reg prometheus.Registerer, config *GaugesConfig) (*Gauges, error) {
	if config == nil {
		config = &GaugesConfig{}
	}
	g := &Gauges{
		clientIDFunc: config.ClientIDFunc,
		intents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_intents",
			Help: "Intents in the database, by state (refreshed on an interval).",
		}, []string{"state"}),
		logger: config.Logger,
		oldestAwaitingApproval: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_oldest_awaiting_approval_age_seconds",
			Help: "Age of the oldest intent awaiting approval, 0 when none; it is cancelled at the approval TTL.",
		}),
		oldestPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_oldest_pending_intent_age_seconds",
			Help: "Age of the oldest pending intent, 0 when none is pending.",
		}),
		pool:     pool,
		interval: config.RefreshInterval,
		unknown: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_unknown_intents",
			Help: "Intents whose outcome is unknown and which wait for an operator.",
		}),
	}
	if g.logger == nil {
		g.logger = slog.New(slog.DiscardHandler)
	}
	if g.interval == 0 {
		g.interval = RefreshIntervalDefault
	}
	if g.interval < 0 {
		return nil, fmt.Errorf("metrics: RefreshInterval must be positive")
	}
	schema := config.Schema
	if schema == "" {
		schema = outbox.SchemaDefault
	}
	g.queries = intentdb.New(schema)
	for _, s := range states {
		g.intents.WithLabelValues(string(s)).Set(0)
	}
	collectors := []prometheus.Collector{g.intents, g.oldestAwaitingApproval, g.oldestPending, g.unknown}
	if g.clientIDFunc != nil {
		// Per process, unlike the other gauges: summed over the replicas it
		// is the number of leaders, 1 when all is well. 0 means no replica
		// rescues stuck jobs, reconciles or expires approvals.
		g.leader = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_leader",
			Help: "1 while this process's River client is River's elected leader (refreshed on an interval), else 0.",
		})
		collectors = append(collectors, g.leader)
	}
	if reg != nil {
		for _, c := range collectors {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("error registering metrics: %w", err)
			}
		}
	}
	return g, nil
}

// Refresh reads the gauges from the database once.
func (g *Gauges) Refresh(ctx context.Context) error {
	counts, err := g.queries.CountByState(ctx, g.pool)
	if err != nil {
		return fmt.Errorf("error reading intent gauges: %w", err)
	}
	for _, s := range states {
		g.intents.WithLabelValues(string(s)).Set(float64(counts.ByState[string(s)]))
	}
	g.oldestAwaitingApproval.Set(counts.OldestAwaitingApprovalAge.Seconds())
	g.oldestPending.Set(counts.OldestPendingAge.Seconds())
	g.unknown.Set(float64(counts.ByState[string(outbox.StateUnknown)]))
	if g.leader != nil {
		return g.refreshLeader(ctx)
	}
	return nil
}

// refreshLeader sets outbox_leader from River's leader row. River exposes
// no leadership state through its client, but its elector keeps one row with
// the leader's client ID and an expiry, renewed while it leads; an expired
// row is a leader that died and has not been replaced yet.
func (g *Gauges) refreshLeader(ctx context.Context) error {
	id := g.clientIDFunc()
	if id == "" {
		g.leader.Set(0)
		return nil
	}
	leaderID, err := g.queries.Leader(ctx, g.pool)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		g.leader.Set(0)
	case err != nil:
		return fmt.Errorf("error reading River's leader: %w", err)
	case leaderID == id:
		g.leader.Set(1)
	default:
		g.leader.Set(0)
	}
	return nil
}

// Start refreshes the gauges now and then every interval until Stop.
func (g *Gauges) Start(ctx context.Context) {
	ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	g.done = make(chan struct{})
	go func() {
		defer close(g.done)
		ticker := time.NewTicker(g.interval)
		defer ticker.Stop()
		for {
			if err := g.Refresh(ctx); err != nil && ctx.Err() == nil {
				g.logger.WarnContext(ctx, "could not refresh intent gauges", slog.String("error", err.Error()))
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
}

// Stop stops the refreshes.
func (g *Gauges) Stop() {
	g.once.Do(func() {
		if g.cancel != nil {
			g.cancel()
			<-g.done
		}
	})
}

// Enqueues are outbox_intents_enqueued_total{effect},
// outbox_intents_deduplicated_total{effect},
// outbox_idempotency_conflicts_total{effect} and
// outbox_possible_duplicates_total{tool,outcome}, counted by the process that
// enqueues (serve's HTTP API and MCP server, through Observe and
// ObservePossibleDuplicate).
type Enqueues struct {
	Conflicts          *prometheus.CounterVec
	Deduplicated       *prometheus.CounterVec
	Enqueued           *prometheus.CounterVec
	PossibleDuplicates *prometheus.CounterVec
}

// NewEnqueues creates the enqueue counters and registers them with reg (none
// when reg is nil).
func NewEnqueues(reg prometheus.Registerer) *Enqueues {
	e := &Enqueues{
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_idempotency_conflicts_total",
			Help: "Enqueues refused because their key was first used for another action.",
		}, []string{"effect"}),
		Deduplicated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_intents_deduplicated_total",
			Help: "Enqueues answered with an existing intent (same key, same action).",
		}, []string{"effect"}),
		Enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_intents_enqueued_total",
			Help: "Intents created.",
		}, []string{"effect"}),
		PossibleDuplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_possible_duplicates_total",
			Help: "Agents' calls under a fresh model key for an action recorded moments before under another key: refused, replayed, or confirmed as new.",
		}, []string{"tool", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(e.Conflicts, e.Deduplicated, e.Enqueued, e.PossibleDuplicates)
	}
	return e
}

// ObservePossibleDuplicate counts one possible duplicate the model-key guard
// met. It has the signature of keyguard.Config.ObserverFunc.
func (e *Enqueues) ObservePossibleDuplicate(tool, outcome string) {
	e.PossibleDuplicates.WithLabelValues(tool, outcome).Inc()
}

// Observe counts one enqueue's outcome. It has the signature of
// outbox.Config.EnqueueObserverFunc.
func (e *Enqueues) Observe(effect string, outcome outbox.EnqueueOutcome) {
	switch outcome {
	case outbox.EnqueueOutcomeCreated:
		e.Enqueued.WithLabelValues(effect).Inc()
	case outbox.EnqueueOutcomeDuplicate:
		e.Deduplicated.WithLabelValues(effect).Inc()
	case outbox.EnqueueOutcomeConflict:
		e.Conflicts.WithLabelValues(effect).Inc()
	}
}

// MCP are outbox_mcp_tasks_total{outcome} and
// outbox_mcp_approvals_total{via,decision}, counted by the process that
// serves MCP (serve's /mcp, outboxd mcp): tasks answered (created, joined
// by a duplicate, polled to an end) and approvals answered from the host
// (docs/agents.md, "Tasks and approvals in the host").
type MCP struct {
	Approvals *prometheus.CounterVec
	Tasks     *prometheus.CounterVec
}

// NewMCP creates the MCP counters and registers them with reg (none when
// reg is nil).
func NewMCP(reg prometheus.Registerer) *MCP {
	m := &MCP{
		Approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_mcp_approvals_total",
			Help: "Approvals answered through MCP, by who answered (via: host) and the decision (approved, denied, decline, cancel).",
		}, []string{"via", "decision"}),
		Tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_mcp_tasks_total",
			Help: "MCP task answers: created for a call, joined by a duplicate call, polled to an end by tasks/get.",
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.Approvals, m.Tasks)
	}
	return m
}

// ObserveTask counts one task answer. It has the signature of
// mcpserver.Config.TaskFunc.
func (m *MCP) ObserveTask(outcome string) { m.Tasks.WithLabelValues(outcome).Inc() }

// ObserveApproval counts one approval answered through MCP. It has the
// signature of mcpserver.Config.ApprovalFunc.
func (m *MCP) ObserveApproval(via, decision string) {
	m.Approvals.WithLabelValues(via, decision).Inc()
}

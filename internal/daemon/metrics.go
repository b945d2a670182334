package daemon

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/internal/metrics"
	"github.com/outbox-dev/outbox/workers"
)

// serveMetrics are every metric serve exposes at /metrics (docs/operations.md, "Metrics"),
// each counted where it happens: enqueues by the client behind the HTTP API
// and MCP, attempts by the workers, the intents by state by a periodic query.
type serveMetrics struct {
	// approvalTTL is outbox_approval_ttl_seconds, OUTBOX_APPROVAL_TTL: with
	// outbox_oldest_awaiting_approval_age_seconds it tells an alert how
	// close the oldest approval is to expiring, whatever the TTL.
	approvalTTL prometheus.Gauge
	// authFailures is outbox_http_auth_failures_total: requests the API
	// and /mcp refused for their token.
	authFailures prometheus.Counter
	// databaseUnavailable is outbox_database_unavailable_total{reason}:
	// API requests answered 503 because the database could not serve
	// them (full, out of connections, locked, too slow, gone).
	databaseUnavailable *prometheus.CounterVec
	enqueues            *metrics.Enqueues
	gauges              *metrics.Gauges
	mcp                 *metrics.MCP
	registry            *prometheus.Registry
	// riverClientID is the dispatcher's River client ID, stored once the
	// dispatcher exists (after the gauges start), for outbox_leader.
	riverClientID atomic.Value
	workers       *workers.Metrics
}

// newServeMetrics registers outbox's metrics and the Go and process
// collectors. refresh of 0 is metrics.RefreshIntervalDefault. The gauges are
// read once Start is called on them.
func newServeMetrics(pool *pgxpool.Pool, schema, version string, refresh time.Duration, logger *slog.Logger, more ...prometheus.Collector) (*serveMetrics, error) {
	reg := prometheus.NewRegistry()
	for _, c := range more {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("error registering a metric: %w", err)
		}
	}
	// outbox_build_info is 1, labelled with what is running: a dashboard
	// joins on it to tell versions apart during a rolling deploy.
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "outbox_build_info",
		Help:        "Always 1; its labels say which outboxd version runs, built with which Go.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	buildInfo.Set(1)
	authFailures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_http_auth_failures_total",
		Help: "Requests to the API and /mcp refused for their bearer token (missing, malformed or unknown).",
	})
	approvalTTL := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_approval_ttl_seconds",
		Help: "How long an intent may await approval before it is cancelled (OUTBOX_APPROVAL_TTL).",
	})
	databaseUnavailable := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_database_unavailable_total",
		Help: "HTTP API requests answered 503 unavailable because the database could not serve them, by reason (connections, disk_full, down, lock_timeout, statement_timeout).",
	}, []string{"reason"})
	// Every reason from the start, at 0, so that an alert's increase()
	// sees the first refusal.
	for _, reason := range apierror.UnavailableReasons {
		databaseUnavailable.WithLabelValues(reason)
	}
	reg.MustRegister(
		approvalTTL,
		authFailures,
		databaseUnavailable,
		buildInfo,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	sm := &serveMetrics{}
	sm.riverClientID.Store("")
	gauges, err := metrics.NewGauges(pool, reg, &metrics.GaugesConfig{
		ClientIDFunc:    func() string { return sm.riverClientID.Load().(string) },
		Logger:          logger,
		RefreshInterval: refresh,
		Schema:          schema,
	})
	if err != nil {
		return nil, err
	}
	sm.approvalTTL = approvalTTL
	sm.authFailures = authFailures
	sm.databaseUnavailable = databaseUnavailable
	sm.enqueues = metrics.NewEnqueues(reg)
	sm.gauges = gauges
	sm.mcp = metrics.NewMCP(reg)
	sm.registry = reg
	sm.workers = workers.NewMetrics(reg)
	return sm, nil
}

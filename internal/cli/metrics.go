package cli

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-dev/outbox/internal/metrics"
	"github.com/outbox-dev/outbox/workers"
)

// gaugeRefreshInterval overrides how often serve reads the database gauges,
// in nanoseconds; 0 keeps metrics.RefreshIntervalDefault. Tests shorten it
// (export_test.go), so that a scrape right after a run sees the run.
var gaugeRefreshInterval atomic.Int64

// serveMetrics are every metric serve exposes at /metrics (docs/operations.md, "Metrics"),
// each counted where it happens: enqueues by the client behind the HTTP API
// and MCP, attempts by the workers, the intents by state by a periodic query.
type serveMetrics struct {
	enqueues *metrics.Enqueues
	gauges   *metrics.Gauges
	registry *prometheus.Registry
	workers  *workers.Metrics
}

// newServeMetrics registers outbox's metrics and the Go and process
// collectors. refresh of 0 is gaugeRefreshInterval's. The gauges are read
// once Start is called on them.
func newServeMetrics(pool *pgxpool.Pool, schema string, refresh time.Duration, logger *slog.Logger) (*serveMetrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if refresh == 0 {
		refresh = time.Duration(gaugeRefreshInterval.Load())
	}
	gauges, err := metrics.NewGauges(pool, reg, &metrics.GaugesConfig{
		Logger:          logger,
		RefreshInterval: refresh,
		Schema:          schema,
	})
	if err != nil {
		return nil, err
	}
	return &serveMetrics{
		enqueues: metrics.NewEnqueues(reg),
		gauges:   gauges,
		registry: reg,
		workers:  workers.NewMetrics(reg),
	}, nil
}

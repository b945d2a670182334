package metrics

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-dev/outbox/internal/apierror"
)

// DatabaseErrors is outbox_database_errors_total{reason}: every statement
// and every connection a process's pool asked for that the database could
// not serve, by apierror's Unavailable reasons (connections, disk_full,
// down, lock_timeout, statement_timeout). It is a pgx tracer on the pool,
// so it counts what the workers, the drain, River and the API ran alike:
// a full disk shows even when no agent calls. Errors that are the
// caller's (a bad argument, a key conflict) and statements whose context
// was cancelled are not counted. Safe for concurrent use.
type DatabaseErrors struct {
	counter *prometheus.CounterVec
}

var (
	_ pgx.QueryTracer       = (*DatabaseErrors)(nil)
	_ pgx.BatchTracer       = (*DatabaseErrors)(nil)
	_ pgxpool.AcquireTracer = (*DatabaseErrors)(nil)
	_ prometheus.Collector  = (*DatabaseErrors)(nil)
)

// NewDatabaseErrors returns the counter, every reason present at 0 so
// that an alert's increase() sees the first error. Register it with a
// registry (it is a prometheus.Collector) and set it as the pool's tracer.
func NewDatabaseErrors() *DatabaseErrors {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_database_errors_total",
		Help: "Statements and connections of this process the database could not serve, by reason (connections, disk_full, down, lock_timeout, statement_timeout): workers, drain, River and API alike.",
	}, []string{"reason"})
	for _, reason := range apierror.UnavailableReasons {
		c.WithLabelValues(reason)
	}
	return &DatabaseErrors{counter: c}
}

// Count counts one error of reason.
func (d *DatabaseErrors) Count(reason string) { d.counter.WithLabelValues(reason).Inc() }

// observe counts err when it is the database's inability to serve, and
// the one who asked still waited for the answer.
func (d *DatabaseErrors) observe(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	if reason := apierror.UnavailableReason(err); reason != "" {
		d.Count(reason)
	}
}

// Describe implements prometheus.Collector.
func (d *DatabaseErrors) Describe(ch chan<- *prometheus.Desc) { d.counter.Describe(ch) }

// Collect implements prometheus.Collector.
func (d *DatabaseErrors) Collect(ch chan<- prometheus.Metric) { d.counter.Collect(ch) }

// TraceQueryStart implements pgx.QueryTracer.
func (d *DatabaseErrors) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (d *DatabaseErrors) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	d.observe(ctx, data.Err)
}

// TraceBatchStart implements pgx.BatchTracer.
func (d *DatabaseErrors) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer. A batch's queries fail
// together; its end counts the batch once.
func (d *DatabaseErrors) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (d *DatabaseErrors) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	d.observe(ctx, data.Err)
}

// TraceAcquireStart implements pgxpool.AcquireTracer.
func (d *DatabaseErrors) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

// TraceAcquireEnd implements pgxpool.AcquireTracer: a connection the pool
// could not open (max_connections reached, the database gone).
func (d *DatabaseErrors) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	d.observe(ctx, data.Err)
}

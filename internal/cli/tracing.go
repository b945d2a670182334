package cli

import (
	"context"
	"log/slog"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/outbox-dev/outbox/internal/telemetry"
)

// startTracing returns the tracer provider the OTEL_* variables ask for
// (docs/operations.md, "Traces"), and stop, which flushes the spans not
// exported yet: call it last, so that the spans of the stop itself go too.
func (a *app) startTracing(ctx context.Context, logger *slog.Logger) (tp *telemetry.TracerProvider, stop func(), err error) {
	tp, err = telemetry.NewTracerProvider(ctx, &telemetry.TracerProviderConfig{
		LookupEnvFunc: a.lookuper.Lookup,
		Version:       version(),
	})
	if err != nil {
		return nil, nil, err
	}
	if tp.Enabled {
		// The instrumentation libraries take the global provider. It is set
		// only when traces are configured, so that serves started side by
		// side in one process (the tests, the demo) stay independent.
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(telemetry.Propagator())
		logger.InfoContext(ctx, "exporting traces")
	}
	return tp, func() {
		if err := tp.Shutdown(context.WithoutCancel(ctx)); err != nil {
			logger.WarnContext(ctx, "could not flush traces", "error", err)
		}
	}, nil
}

// sqlTracer is the pool's tracer: with traces on and OUTBOX_TRACE_SQL, a
// span for each statement (otelpgx), with its text and never its
// parameters (otelpgx's default); otherwise none.
func sqlTracer(tp *telemetry.TracerProvider, cfg *Config) []pgx.QueryTracer {
	if !tp.Enabled || !cfg.TraceSQL {
		return nil
	}
	return []pgx.QueryTracer{otelpgx.NewTracer(
		otelpgx.WithTracerProvider(tp),
		otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
	)}
}

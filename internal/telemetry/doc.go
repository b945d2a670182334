// Package telemetry gives outboxd its OpenTelemetry tracer provider and ties
// its logs to traces.
//
// Traces are off unless the standard OTEL_* variables ask for them
// (OTEL_TRACES_EXPORTER=otlp with OTEL_EXPORTER_OTLP_ENDPOINT, or console):
// the exporter is chosen by go.opentelemetry.io/contrib/exporters/autoexport,
// and with none configured no span is recorded at all. Every span's resource
// carries service.version, the version outbox_build_info and the logs show.
package telemetry

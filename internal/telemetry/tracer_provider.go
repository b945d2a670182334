package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the service.name of outboxd's spans, unless OTEL_SERVICE_NAME
// or OTEL_RESOURCE_ATTRIBUTES say otherwise.
const ServiceName = "outboxd"

// TracerProviderConfig configures NewTracerProvider.
type TracerProviderConfig struct {
	// LookupEnvFunc reads an environment variable: the OTEL_* switches that
	// turn traces on. Defaults to none set, so traces are off.
	LookupEnvFunc func(name string) (string, bool)
	// Version is outboxd's version, recorded as service.version. Defaults to
	// empty, left out.
	Version string
}

// TracerProvider is outboxd's tracer provider: a no-op one when traces are
// off.
type TracerProvider struct {
	trace.TracerProvider
	// Enabled is true when spans are exported.
	Enabled bool

	sdk *sdktrace.TracerProvider
}

// Shutdown flushes the spans not exported yet and stops the exporter.
func (p *TracerProvider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// Propagator is the W3C trace context (traceparent, tracestate) and baggage,
// the propagation every OpenTelemetry SDK speaks by default.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// NewTracerProvider returns the tracer provider the OTEL_* variables ask
// for. autoexport alone would default to OTLP; outbox defaults to no traces,
// so that a process nobody configured never tries to reach a collector:
// traces are on only when OTEL_TRACES_EXPORTER names an exporter other than
// none, and OTEL_SDK_DISABLED is not true.
func NewTracerProvider(ctx context.Context, config *TracerProviderConfig) (*TracerProvider, error) {
	if config == nil {
		config = &TracerProviderConfig{}
	}
	lookup := config.LookupEnvFunc
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	exporters, _ := lookup("OTEL_TRACES_EXPORTER")
	disabled, _ := lookup("OTEL_SDK_DISABLED")
	if strings.TrimSpace(exporters) == "" || strings.TrimSpace(exporters) == "none" || strings.EqualFold(strings.TrimSpace(disabled), "true") {
		return &TracerProvider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	exporter, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("error creating the span exporter (OTEL_TRACES_EXPORTER): %w", err)
	}
	res, err := Resource(ctx, config.Version)
	if err != nil {
		return nil, errors.Join(err, exporter.Shutdown(ctx))
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return &TracerProvider{TracerProvider: sdk, Enabled: true, sdk: sdk}, nil
}

// Resource describes outboxd to a tracing back end: service.name and
// service.version, merged under what OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES set.
func Resource(ctx context.Context, version string) (*resource.Resource, error) {
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceName(ServiceName))}
	if version != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(version)))
	}
	// WithFromEnv last: the operator's variables win over outbox's defaults.
	res, err := resource.New(ctx, append(attrs, resource.WithTelemetrySDK(), resource.WithFromEnv())...)
	if err != nil {
		return nil, fmt.Errorf("error describing the service for traces: %w", err)
	}
	return res, nil
}

// Variables are the OTEL_* environment variables that outboxd honours,
// read by OpenTelemetry's SDK and autoexport rather than by outboxd's
// configuration, each with whether its value is a secret (an exporter's
// headers carry a collector's credentials). Deployment checks (the
// Kubernetes manifests' test) accept these beside outboxd's own.
var Variables = map[string]bool{
	"OTEL_SDK_DISABLED":                  false,
	"OTEL_TRACES_EXPORTER":               false,
	"OTEL_TRACES_SAMPLER":                false,
	"OTEL_TRACES_SAMPLER_ARG":            false,
	"OTEL_SERVICE_NAME":                  false,
	"OTEL_RESOURCE_ATTRIBUTES":           false,
	"OTEL_BSP_SCHEDULE_DELAY":            false,
	"OTEL_BSP_EXPORT_TIMEOUT":            false,
	"OTEL_BSP_MAX_QUEUE_SIZE":            false,
	"OTEL_BSP_MAX_EXPORT_BATCH_SIZE":     false,
	"OTEL_EXPORTER_OTLP_ENDPOINT":        false,
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": false,
	"OTEL_EXPORTER_OTLP_PROTOCOL":        false,
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": false,
	"OTEL_EXPORTER_OTLP_TIMEOUT":         false,
	"OTEL_EXPORTER_OTLP_COMPRESSION":     false,
	"OTEL_EXPORTER_OTLP_INSECURE":        false,
	"OTEL_EXPORTER_OTLP_CERTIFICATE":     false,
	"OTEL_EXPORTER_OTLP_HEADERS":         true,
	"OTEL_EXPORTER_OTLP_TRACES_HEADERS":  true,
}

package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-dev/outbox/internal/telemetry"
)

// TestLogHandler logs inside and outside a span: the ids are there only
// inside, and are the span's.
func TestLogHandler(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	logger := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("version", "v1.2.3")
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })

	ctx, span := provider.Tracer("test").Start(context.Background(), "work")
	logger.InfoContext(ctx, "inside")
	span.End()
	logger.InfoContext(context.Background(), "outside")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var inside, outside map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &inside))
	require.NoError(t, json.Unmarshal(lines[1], &outside))
	require.Equal(t, span.SpanContext().TraceID().String(), inside["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), inside["span_id"])
	require.Equal(t, "v1.2.3", inside["version"])
	require.NotContains(t, outside, "trace_id")
	require.NotContains(t, outside, "span_id")
}

// TestTracerProviderOffByDefault: without OTEL_TRACES_EXPORTER, or with
// none, or with the SDK disabled, nothing is recorded or exported.
func TestTracerProviderOffByDefault(t *testing.T) {
	t.Parallel()

	for name, env := range map[string]map[string]string{
		"Unset":    {},
		"None":     {"OTEL_TRACES_EXPORTER": "none"},
		"Disabled": {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			provider, err := telemetry.NewTracerProvider(t.Context(), &telemetry.TracerProviderConfig{
				LookupEnvFunc: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
				Version:       "v1.2.3",
			})
			require.NoError(t, err)
			require.False(t, provider.Enabled)
			_, span := provider.Tracer("test").Start(t.Context(), "work")
			require.False(t, span.IsRecording())
			span.End()
			require.NoError(t, provider.Shutdown(t.Context()))
		})
	}

	t.Run("Console", func(t *testing.T) {
		t.Parallel()
		provider, err := telemetry.NewTracerProvider(t.Context(), &telemetry.TracerProviderConfig{
			LookupEnvFunc: func(k string) (string, bool) {
				return map[string]string{"OTEL_TRACES_EXPORTER": "console"}[k], k == "OTEL_TRACES_EXPORTER"
			},
		})
		require.NoError(t, err)
		require.True(t, provider.Enabled)
		_, span := provider.Tracer("test").Start(t.Context(), "work")
		require.True(t, span.IsRecording())
		span.End()
		require.NoError(t, provider.Shutdown(t.Context()))
	})
}

// TestResourceVersion: every span's resource names outboxd and its version.
func TestResourceVersion(t *testing.T) {
	t.Parallel()

	res, err := telemetry.Resource(t.Context(), "v1.2.3")
	require.NoError(t, err)
	attrs := map[string]string{}
	for _, kv := range res.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsString()
	}
	require.Equal(t, "v1.2.3", attrs[string(semconv.ServiceVersionKey)])
	require.Equal(t, telemetry.ServiceName, attrs[string(semconv.ServiceNameKey)])
}

package outbox

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The enqueue is a hot path: without a span, reading the traceparent
// allocates nothing. Not parallel: AllocsPerRun counts the whole process's
// allocations.
func TestTraceparentWithoutSpan(t *testing.T) {
	ctx := context.Background()
	require.Nil(t, traceparent(ctx))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = traceparent(ctx) }))

	provider := sdktrace.NewTracerProvider()
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.WithoutCancel(ctx))) })
	spanCtx, span := provider.Tracer("outbox_test").Start(ctx, "enqueue")
	defer span.End()
	tp := traceparent(spanCtx)
	require.NotNil(t, tp)
	require.Equal(t, "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01", *tp)
}

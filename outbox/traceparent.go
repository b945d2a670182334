package outbox

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceparent returns the W3C traceparent of ctx's span, which an intent
// records so that its attempts' spans, in the dispatcher's process and
// often much later, can link to the enqueue's; nil when ctx carries no
// valid span. The enqueue is a hot path: without a span it allocates
// nothing.
func traceparent(ctx context.Context) *string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	tp, ok := carrier["traceparent"]
	if !ok {
		return nil
	}
	return &tp
}

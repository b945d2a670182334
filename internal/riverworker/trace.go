package riverworker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/outbox"
)

// The attempt span's attributes. They name the intent and what became of
// it, never its key or arguments, which can carry personal data.
const (
	attrIntentID  = attribute.Key("outbox.intent.id")
	attrEffect    = attribute.Key("outbox.effect")
	attrNamespace = attribute.Key("outbox.namespace")
	attrAttempt   = attribute.Key("outbox.attempt")
	attrGuarantee = attribute.Key("outbox.guarantee")
	attrOutcome   = attribute.Key("outbox.outcome")
	attrState     = attribute.Key("outbox.state")
	attrErrorType = attribute.Key("error.type")
)

// outcomeNotRecorded is the attempt span's outcome when the attempt's
// outcome could not be written (OutcomeNotRecordedError).
const outcomeNotRecorded = "not_recorded"

// startAttemptSpan starts the span of c's attempt, "attempt {effect}", a
// child of the River job's span when there is one (otelriver's river.work;
// a batch's for a first attempt in a batch). It links to the span that
// enqueued the intent (its stored traceparent) rather than descending from
// it: the attempt may run minutes or days later, as otelriver links a job
// to its insert. With traces off the span does not record and nothing is
// parsed or built.
func (w *IntentWorker) startAttemptSpan(ctx context.Context, c *claimed) (context.Context, trace.Span) {
	ctx, span := w.tracer.Start(ctx, "attempt "+c.Effect)
	if !span.IsRecording() {
		return ctx, span
	}
	if c.Traceparent != "" {
		enqueued := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": c.Traceparent})
		if sc := trace.SpanContextFromContext(enqueued); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	span.SetAttributes(
		attrIntentID.Int64(c.ID),
		attrEffect.String(c.Effect),
		attrNamespace.String(c.Namespace),
		attrAttempt.Int(c.Attempt),
	)
	return ctx, span
}

// spanGuarantee records the guarantee the attempt runs under.
func spanGuarantee(span trace.Span, g effects.Guarantee) {
	if span.IsRecording() {
		span.SetAttributes(attrGuarantee.String(string(g)))
	}
}

// spanOutcome records what the attempt did: its outcome (the label of
// outbox_effect_attempts_total, "stale" when another attempt had taken the
// intent over, "not_recorded" when the outcome could not be written), the
// state it left the intent in (none for those two), and the error code
// recorded, if any. An intent that ended failed or unknown, and an outcome
// not recorded, make an error span; an intent left for a retry does not
// (the next attempt has its own span).
func spanOutcome(span trace.Span, outcome string, state outbox.State, code string) {
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attrOutcome.String(outcome)}
	if state != "" {
		attrs = append(attrs, attrState.String(string(state)))
	}
	if code != "" {
		attrs = append(attrs, attrErrorType.String(code))
	}
	span.SetAttributes(attrs...)
	switch {
	case outcome == outcomeNotRecorded:
		span.SetStatus(codes.Error, "outcome not recorded")
	case state == outbox.StateFailed || state == outbox.StateUnknown:
		span.SetStatus(codes.Error, code)
	}
}

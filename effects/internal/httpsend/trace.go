package httpsend

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

type urlTemplateKey struct{}

// WithURLTemplate returns a context whose provider requests are named by
// template in their client spans (url.template, and the span's name "POST
// {template}"): the request's path as the effect declares it, such as
// "/api/v2/tickets.json" or a declared effect's "{env.BASE}/tickets/{args.id}".
// A span never shows the URL sent: its path and query can carry arguments,
// the provider key (a look-up's query) or a secret (a webhook URL's token).
func WithURLTemplate(ctx context.Context, template string) context.Context {
	return context.WithValue(ctx, urlTemplateKey{}, template)
}

func urlTemplateOf(ctx context.Context) string {
	t, _ := ctx.Value(urlTemplateKey{}).(string)
	return t
}

// traced wraps base so that each request is a client span (otelhttp), a
// child of the span in the request's context (the attempt's), from that
// span's tracer provider. The W3C trace context is sent along, so that a
// provider (a webhook's receiver) can continue the trace. otelhttp's own
// metrics are left out: outbox's are Prometheus', per effect.
func traced(base http.RoundTripper) http.RoundTripper {
	return &whenRecording{base: base, traced: newOtelTransport(base)}
}

// whenRecording sends a request through traced when its context holds a
// recording span, and straight to base otherwise: with traces off
// (BenchmarkTransport) otelhttp's wrapping would cost a request 20
// allocations and 3 KB for a span nobody records.
type whenRecording struct {
	base, traced http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *whenRecording) RoundTrip(req *http.Request) (*http.Response, error) {
	if trace.SpanFromContext(req.Context()).IsRecording() {
		return t.traced.RoundTrip(req)
	}
	return t.base.RoundTrip(req)
}

func newOtelTransport(base http.RoundTripper) http.RoundTripper {
	return otelhttp.NewTransport(&spanURL{base: base},
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if t := urlTemplateOf(r.Context()); t != "" {
				return r.Method + " " + t
			}
			return r.Method
		}),
	)
}

// spanURL replaces the url.full that otelhttp recorded with the request's
// scheme and host only, and adds the effect's url.template. It runs inside
// otelhttp's span, after otelhttp set its attributes; a span's attributes
// are read last-one-wins, so the full URL is never exported.
type spanURL struct {
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *spanURL) RoundTrip(req *http.Request) (*http.Response, error) {
	if span := trace.SpanFromContext(req.Context()); span.IsRecording() {
		attrs := []attribute.KeyValue{semconv.URLFull(req.URL.Scheme + "://" + req.URL.Host)}
		if tmpl := urlTemplateOf(req.Context()); tmpl != "" {
			attrs = append(attrs, semconv.URLTemplate(tmpl))
		}
		span.SetAttributes(attrs...)
	}
	return t.base.RoundTrip(req)
}

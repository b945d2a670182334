package httpapi

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// traced makes each request a server span (otelhttp) of provider, whose
// parent is the caller's W3C traceparent when it sends one. The span is
// named by the route that served it ("POST /v1/intents/{key}"), never by
// the raw path, which holds the idempotency key: url.path and http.route
// are set to the route too. otelhttp's own metrics are left out: outbox's
// are Prometheus'. A nil provider is the global one, a no-op unless serve
// configured traces.
func traced(next http.Handler, provider trace.TracerProvider) http.Handler {
	if provider == nil {
		provider = otel.GetTracerProvider()
	}
	return otelhttp.NewHandler(routeAttrs(next), "outbox.api",
		otelhttp.WithTracerProvider(provider),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
}

// routeAttrs runs next, which routes the request (a ServeMux sets its
// Pattern), then records the route as the span's url.path and http.route
// over the raw path otelhttp recorded at the start: a span's attributes
// are read last-one-wins. A request no route served records an empty path.
func routeAttrs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			route := r.Pattern
			if i := strings.IndexByte(route, ' '); i >= 0 {
				route = route[i+1:] // the pattern's method goes
			}
			span.SetAttributes(semconv.URLPath(route), semconv.HTTPRoute(route))
		}
	})
}

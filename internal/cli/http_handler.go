package cli

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandlerConfig is what newHTTPHandler serves.
type httpHandlerConfig struct {
	// Metrics is what /metrics exposes.
	Metrics prometheus.Gatherer
}

// newHTTPHandler returns serve's HTTP handler: /healthz and /metrics.
func newHTTPHandler(config *httpHandlerConfig) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Alive is all this says; the database is not asked.
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(config.Metrics, promhttp.HandlerOpts{}))
	return mux
}

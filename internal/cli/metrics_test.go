package cli_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/cli"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// apiCall sends one request to serve's HTTP API and returns its status and
// the intent answered, if any.
func apiCall(t *testing.T, method, url, key, body string) (int, *outbox.Intent) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode >= 400 {
		return resp.StatusCode, nil
	}
	var intent outbox.Intent
	require.NoError(t, json.Unmarshal(raw, &intent), string(raw))
	return resp.StatusCode, &intent
}

// scrape reads /metrics into metric families.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	status, body := httpGet(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, status)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	return families
}

// metricValue is the value of the family's series with labels (name, value
// pairs), or -1 when there is none.
func metricValue(families map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	family, ok := families[name]
	if !ok {
		return -1
	}
series:
	for _, m := range family.GetMetric() {
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// TestServeMetrics runs intents of every outcome through serve's HTTP API and
// finds each metric of docs/operations.md at /metrics with the values the run
// implies.
func TestServeMetrics(t *testing.T) {
	t.Parallel()

	// The database gauges are read on an interval; make it short enough
	// to wait for.
	cli.SetGaugeRefreshInterval(200 * time.Millisecond)
	bundle := setup(t)
	srv := testrun.Serve(t, bundle.env)
	api := "http://" + srv.Addr + "/v1/intents"

	enqueue := func(key, effect, args string) (int, *outbox.Intent) {
		return apiCall(t, http.MethodPost, api, key, `{"effect": "`+effect+`", "args": `+args+`}`)
	}
	wait := func(key string, want outbox.State) {
		t.Helper()
		_, intent := apiCall(t, http.MethodGet, api+"/"+key+"?wait=20s", "", "")
		require.Equal(t, want, intent.State, key)
	}

	// Three noop intents succeed; three duplicates and one conflict are
	// answered from the first.
	for _, key := range []string{"m-1", "m-2", "m-3"} {
		status, _ := enqueue(key, "noop", `{"n": 1}`)
		require.Equal(t, http.StatusCreated, status)
	}
	const duplicates = 3
	for _, key := range []string{"m-1", "m-1", "m-2"} {
		status, _ := enqueue(key, "noop", `{"n": 1.0}`)
		require.Equal(t, http.StatusOK, status)
	}
	status, _ := enqueue("m-3", "noop", `{"n": 2}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	// A lost outcome of an at-most-once effect: unknown.
	status, _ = enqueue("m-4", "noop_at_most_once", `{"_noop": {"fail": "ambiguous"}}`)
	require.Equal(t, http.StatusCreated, status)
	// A permanent failure.
	status, _ = enqueue("m-5", "noop_reconcilable", `{"_noop": {"fail": "permanent"}}`)
	require.Equal(t, http.StatusCreated, status)
	// Two intents whose provider never takes them: one stays pending, one
	// is cancelled between its attempts.
	for _, key := range []string{"m-6", "m-7"} {
		status, _ = enqueue(key, "noop", `{"_noop": {"fail": "not_sent"}}`)
		require.Equal(t, http.StatusCreated, status)
	}
	for _, key := range []string{"m-1", "m-2", "m-3"} {
		wait(key, outbox.StateSucceeded)
	}
	wait("m-4", outbox.StateUnknown)
	wait("m-5", outbox.StateFailed)
	// Cancelled once attempted, so that the drain handed it over first (a
	// pending intent is cancellable before that, and then never drained).
	require.Eventually(t, func() bool {
		if _, intent := apiCall(t, http.MethodGet, api+"/m-7", "", ""); intent == nil || intent.Attempts == 0 {
			return false
		}
		status, _ := apiCall(t, http.MethodPost, api+"/m-7/cancel", "", "")
		return status == http.StatusOK
	}, 20*time.Second, 100*time.Millisecond, "m-7 was never cancellable after an attempt")

	var families map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		families = scrape(t, srv.Addr)
		return metricValue(families, "outbox_intents", "state", "cancelled") == 1 &&
			metricValue(families, "outbox_effect_attempts_total", "effect", "noop", "outcome", "not_sent") >= 2
	}, 20*time.Second, 100*time.Millisecond)

	for _, want := range []struct {
		name   string
		labels []string
		value  float64
	}{
		{"outbox_intents_enqueued_total", []string{"effect", "noop"}, 5},
		{"outbox_intents_enqueued_total", []string{"effect", "noop_at_most_once"}, 1},
		{"outbox_intents_enqueued_total", []string{"effect", "noop_reconcilable"}, 1},
		{"outbox_intents_deduplicated_total", []string{"effect", "noop"}, duplicates},
		{"outbox_idempotency_conflicts_total", []string{"effect", "noop"}, 1},
		{"outbox_effect_attempts_total", []string{"effect", "noop", "outcome", "succeeded"}, 3},
		{"outbox_effect_attempts_total", []string{"effect", "noop_at_most_once", "outcome", "ambiguous"}, 1},
		{"outbox_effect_attempts_total", []string{"effect", "noop_reconcilable", "outcome", "failed"}, 1},
		{"outbox_intents", []string{"state", "succeeded"}, 3},
		{"outbox_intents", []string{"state", "unknown"}, 1},
		{"outbox_intents", []string{"state", "failed"}, 1},
		{"outbox_intents", []string{"state", "pending"}, 1},
		{"outbox_intents", []string{"state", "cancelled"}, 1},
		{"outbox_intents", []string{"state", "running"}, 0},
		{"outbox_unknown_intents", nil, 1},
		{"outbox_stale_writes_total", nil, 0},
	} {
		require.Equal(t, want.value, metricValue(families, want.name, want.labels...), "%s%v", want.name, want.labels)
	}
	// The histogram observed every call of the effect: three that
	// succeeded and at least one failed attempt of each not-sent intent.
	require.GreaterOrEqual(t, metricValue(families, "outbox_effect_duration_seconds", "effect", "noop"), 5.0)
	require.Equal(t, dto.MetricType_HISTOGRAM, families["outbox_effect_duration_seconds"].GetType())
	// Bounds a person reads at a glance, up to a minute.
	var bounds []float64
	for _, b := range families["outbox_effect_duration_seconds"].GetMetric()[0].GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	require.Equal(t, []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, math.Inf(1)}, bounds)
	// Which build runs.
	info := families["outbox_build_info"].GetMetric()
	require.Len(t, info, 1)
	require.Equal(t, 1.0, info[0].GetGauge().GetValue())
	labels := map[string]string{}
	for _, l := range info[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	require.Equal(t, runtime.Version(), labels["goversion"])
	require.NotEmpty(t, labels["version"])
	// m-6 has been pending since the start of the run.
	age := metricValue(families, "outbox_oldest_pending_intent_age_seconds")
	require.Greater(t, age, 0.0)
	require.Less(t, age, 120.0)
	// And the Go and process collectors.
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_start_time_seconds"} {
		require.Contains(t, families, name)
	}
	// The drain handed every created intent to River, and this serve, alone
	// on its schema, becomes River's leader (elected within seconds, read
	// on the gauges' interval).
	// The last intent may still be on its way to a job when the first
	// scrape came: wait for the count rather than count on timing.
	// At least 7: an intent handed over again (the reconciler's repair of
	// a job River lost under load) is counted again.
	var drained float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if drained = metricValue(scrape(t, srv.Addr), "outbox_intents_drained_total"); drained >= 7 {
			break
		}
	}
	require.GreaterOrEqual(t, drained, 7.0, "the drain never counted the 7 intents")
	if drained != 7 {
		t.Logf("outbox_intents_drained_total = %v: an intent was handed over again", drained)
	}
	require.Equal(t, (24 * time.Hour).Seconds(), metricValue(families, "outbox_approval_ttl_seconds"))
	require.Equal(t, 0.0, metricValue(families, "outbox_oldest_awaiting_approval_age_seconds"))
	require.Eventually(t, func() bool {
		return metricValue(scrape(t, srv.Addr), "outbox_leader") == 1
	}, 30*time.Second, 200*time.Millisecond, "serve never reported itself River's leader")
	require.Equal(t, 0, srv.Stop())
}

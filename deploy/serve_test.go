package deploy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// serveBundle is a running outboxd serve, in process, with the sandbox
// effects, on a migrated schema of its own.
type serveBundle struct {
	// addr is the HTTP listener's address (API and /metrics).
	addr string
}

// startServe runs outboxd serve until the test ends. It is the real command,
// with its real configuration and registry, so what /metrics shows is what
// a deployment's Prometheus scrapes.
func startServe(t *testing.T) *serveBundle {
	t.Helper()
	_, schema := testdb.MigratedSchema(t)
	srv := testrun.Serve(t, map[string]string{
		"DATABASE_URL":   testdb.URL(t),
		"OUTBOX_SANDBOX": "true",
		"OUTBOX_SCHEMA":  schema,
	})
	return &serveBundle{addr: srv.Addr}
}

// enqueue posts one intent to the API and returns the status.
func (b *serveBundle) enqueue(t *testing.T, key, effect, args string) int {
	t.Helper()
	body := `{"effect": "` + effect + `", "args": ` + args + `}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+b.addr+"/v1/intents", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// waitState waits, through the API's own wait, until the intent is in state.
func (b *serveBundle) waitState(t *testing.T, key string, state outbox.State) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+b.addr+"/v1/intents/"+key+"?wait=20s", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var intent outbox.Intent
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&intent))
	require.Equal(t, state, intent.State, key)
}

// exercise makes serve count something in each of its labelled metrics: a
// label-less vector exports nothing until its first observation, and a
// dashboard checked against an idle serve would miss them. An intent
// created, a duplicate, a conflict, and an attempt that succeeded.
func (b *serveBundle) exercise(t *testing.T) {
	t.Helper()
	require.Equal(t, http.StatusCreated, b.enqueue(t, "deploy-1", "noop", `{"n": 1}`))
	require.Equal(t, http.StatusOK, b.enqueue(t, "deploy-1", "noop", `{"n": 1}`))
	require.Equal(t, http.StatusUnprocessableEntity, b.enqueue(t, "deploy-1", "noop", `{"n": 2}`))
	b.waitState(t, "deploy-1", outbox.StateSucceeded)
	// The worker counts the attempt after it recorded the outcome, so the
	// counter may lag the state the API answered.
	require.Eventually(t, func() bool {
		return b.metricNames(t)["outbox_effect_attempts_total"]
	}, 10*time.Second, 50*time.Millisecond, "the attempt was never counted")
}

// metricNames scrapes /metrics and returns every series name it exports,
// a histogram's _bucket, _sum and _count included.
func (b *serveBundle) metricNames(t *testing.T) map[string]bool {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+b.addr+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	textParser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := textParser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	names := map[string]bool{}
	for name, family := range families {
		if len(family.GetMetric()) == 0 {
			continue
		}
		names[name] = true
		switch family.GetType().String() {
		case "HISTOGRAM":
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case "SUMMARY":
			names[name+"_sum"], names[name+"_count"] = true, true
		}
	}
	return names
}

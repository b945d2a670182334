package metrics_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/metrics"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestGaugesAndEnqueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testdb.MigratedSchema(t)
	reg := prometheus.NewRegistry()
	enqueues := metrics.NewEnqueues(reg)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema, EnqueueObserverFunc: enqueues.Observe})
	require.NoError(t, err)

	for _, k := range []string{"a", "b", "c", "d"} {
		_, err := client.EnqueueTx(ctx, pool, &outbox.EnqueueParams{Key: k, Effect: "noop", Args: map[string]any{}})
		require.NoError(t, err)
	}
	_, err = client.EnqueueTx(ctx, pool, &outbox.EnqueueParams{Key: "a", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	_, err = client.EnqueueTx(ctx, pool, &outbox.EnqueueParams{Key: "a", Effect: "noop", Args: map[string]any{"x": 1}})
	require.ErrorIs(t, err, outbox.ErrKeyReused)
	require.Equal(t, 4.0, testutil.ToFloat64(enqueues.Enqueued.WithLabelValues("noop")))
	require.Equal(t, 1.0, testutil.ToFloat64(enqueues.Deduplicated.WithLabelValues("noop")))
	require.Equal(t, 1.0, testutil.ToFloat64(enqueues.Conflicts.WithLabelValues("noop")))

	_, err = pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "outbox_intent"}.Sanitize()+`
		SET state = CASE key WHEN 'a' THEN 'unknown' WHEN 'b' THEN 'succeeded' ELSE state END,
		    created_at = CASE key WHEN 'c' THEN now() - interval '1 hour' ELSE created_at END`)
	require.NoError(t, err)

	gauges, err := metrics.NewGauges(pool, reg, &metrics.GaugesConfig{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, gauges.Refresh(ctx))
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			if m.GetGauge() != nil {
				got[name] = m.GetGauge().GetValue()
			}
		}
	}
	require.Equal(t, 2.0, got["outbox_intents/pending"])
	require.Equal(t, 1.0, got["outbox_intents/unknown"])
	require.Equal(t, 1.0, got["outbox_intents/succeeded"])
	require.Equal(t, 0.0, got["outbox_intents/failed"])
	require.Equal(t, 1.0, got["outbox_unknown_intents"])
	require.InDelta(t, 3600, got["outbox_oldest_pending_intent_age_seconds"], 60)

	gauges.Start(ctx)
	gauges.Stop()
}

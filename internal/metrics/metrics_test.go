package metrics_test

import (
	"context"
	"sync/atomic"
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

	// An UPDATE, not testfactory.Intent: the intents the enqueues above
	// counted.
	_, err = pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "outbox_intent"}.Sanitize()+`
		SET state = CASE key WHEN 'a' THEN 'unknown' WHEN 'b' THEN 'succeeded' WHEN 'd' THEN 'awaiting_approval' ELSE state END,
		    created_at = CASE key WHEN 'c' THEN now() - interval '1 hour' WHEN 'd' THEN now() - interval '2 hours' ELSE created_at END`)
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
	require.Equal(t, 1.0, got["outbox_intents/pending"])
	require.Equal(t, 1.0, got["outbox_intents/awaiting_approval"])
	require.Equal(t, 1.0, got["outbox_intents/unknown"])
	require.Equal(t, 1.0, got["outbox_intents/succeeded"])
	require.Equal(t, 0.0, got["outbox_intents/failed"])
	require.Equal(t, 1.0, got["outbox_unknown_intents"])
	// Each age is its own state's: the older intent awaiting approval does
	// not count as pending.
	require.InDelta(t, 3600, got["outbox_oldest_pending_intent_age_seconds"], 60)
	require.InDelta(t, 7200, got["outbox_oldest_awaiting_approval_age_seconds"], 60)

	gauges.Start(ctx)
	gauges.Stop()
}

// TestGaugesLeader reads outbox_leader from River's leader row: 1 only while
// an unexpired row names this process's client.
func TestGaugesLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testdb.MigratedSchema(t)
	leaderTable := pgx.Identifier{schema, "river_leader"}.Sanitize()

	var clientID atomic.Value
	clientID.Store("")
	reg := prometheus.NewRegistry()
	gauges, err := metrics.NewGauges(pool, reg, &metrics.GaugesConfig{
		ClientIDFunc: func() string { return clientID.Load().(string) },
		Schema:       schema,
	})
	require.NoError(t, err)
	leader := func() float64 {
		t.Helper()
		require.NoError(t, gauges.Refresh(ctx))
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == "outbox_leader" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("outbox_leader is not exported")
		return -1
	}
	setLeader := func(id, expiresIn string) {
		t.Helper()
		_, err := pool.Exec(ctx, `DELETE FROM `+leaderTable)
		require.NoError(t, err)
		if id != "" {
			_, err = pool.Exec(ctx, `INSERT INTO `+leaderTable+` (leader_id, elected_at, expires_at)
				VALUES ($1, now(), now() + $2::interval)`, id, expiresIn)
			require.NoError(t, err)
		}
	}

	// Before the client exists, and with no leader at all.
	require.Equal(t, 0.0, leader())
	clientID.Store("replica-1")
	require.Equal(t, 0.0, leader())
	setLeader("replica-1", "10 seconds")
	require.Equal(t, 1.0, leader())
	setLeader("replica-2", "10 seconds")
	require.Equal(t, 0.0, leader())
	// A leader that died: its row expired and nobody has taken over.
	setLeader("replica-1", "-1 second")
	require.Equal(t, 0.0, leader())

	// Without a ClientIDFunc there is no outbox_leader.
	other := prometheus.NewRegistry()
	_, err = metrics.NewGauges(pool, other, &metrics.GaugesConfig{Schema: schema})
	require.NoError(t, err)
	families, err := other.Gather()
	require.NoError(t, err)
	for _, f := range families {
		require.NotEqual(t, "outbox_leader", f.GetName())
	}
}

package cli_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/internal/testdb"
)

// outboxd bench on a small count: every lane measured, the figures
// plausible, every schema it made dropped.
func TestBench(t *testing.T) {
	t.Parallel()
	// A database of its own: its schemas are bench's alone, whatever else
	// runs on the server.
	url := testdb.Database(t)
	env := map[string]string{"DATABASE_URL": url}

	res := runEnv(t, env, nil, "bench", "--count", "0")
	require.Equal(t, 2, res.code)
	require.Contains(t, res.stderr, "--count must be from 100")

	// Five of the lanes, both baselines among them: every lane's own run is
	// internal/bench's TestRunSmall, a report of every lane its TestReport.
	res = runEnv(t, env, nil, "bench", "--count", "100", "--clients", "4", "--workers", "5", "--batch-count", "1000",
		"--lane", "outbox", "--lane", "hand-written outbox on River", "--lane", "river Insert (no caller tx)",
		"--lane", "outbox (no caller tx)", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var report struct {
		Lanes []struct {
			Name             string  `json:"name"`
			Ratio            float64 `json:"ratio"`
			RatioLikeForLike float64 `json:"ratio_like_for_like"`
			RatioHandWritten float64 `json:"ratio_to_hand_written"`
			Max              struct {
				Count   int     `json:"count"`
				Rate    float64 `json:"rate_per_s"`
				PeakRSS int64   `json:"peak_rss_bytes"`
			} `json:"max"`
			Paced struct {
				P50 int64 `json:"p50_ns"`
				P99 int64 `json:"p99_ns"`
			} `json:"paced"`
			Cost *struct {
				WAL         float64  `json:"wal_bytes_per_action"`
				IndexTuples float64  `json:"index_tuples_per_action"`
				HOTShare    *float64 `json:"hot_update_share"`
				Inserts     float64  `json:"inserts_per_action"`
			} `json:"cost"`
		} `json:"lanes"`
		OfferedRate float64 `json:"offered_rate_per_s"`
		Batch       struct {
			River struct {
				Rate float64 `json:"rate_per_s"`
			} `json:"river"`
			Outbox struct {
				Rate float64 `json:"rate_per_s"`
			} `json:"outbox"`
		} `json:"batch"`
		BatchRatio float64 `json:"batch_ratio"`
		Targets    []struct {
			Name  string  `json:"name"`
			Value float64 `json:"value"`
		} `json:"targets"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &report), res.stdout)
	require.Len(t, report.Lanes, 5)
	require.Equal(t, "river InsertTx", report.Lanes[0].Name)
	require.InDelta(t, 1.0, report.Lanes[0].Ratio, 1e-9)
	for _, l := range report.Lanes {
		require.Equal(t, 100, l.Max.Count, l.Name)
		require.Positive(t, l.Max.Rate, l.Name)
		require.Positive(t, l.Max.PeakRSS, l.Name)
		require.LessOrEqual(t, l.Paced.P50, l.Paced.P99, l.Name)
		require.Positive(t, l.Paced.P99, l.Name)
		// Every action writes at least one row, and each row an entry in
		// its table's primary key.
		require.NotNil(t, l.Cost, l.Name)
		require.Positive(t, l.Cost.WAL, l.Name)
		require.GreaterOrEqual(t, l.Cost.Inserts, 1.0, l.Name)
		require.GreaterOrEqual(t, l.Cost.IndexTuples, l.Cost.Inserts, l.Name)
		require.NotNil(t, l.Cost.HOTShare, l.Name)
		require.True(t, *l.Cost.HOTShare >= 0 && *l.Cost.HOTShare <= 1, l.Name)
	}
	// The lanes without a caller's transaction are set against River's
	// Insert, the others against InsertTx.
	names := make([]string, len(report.Lanes))
	for i, l := range report.Lanes {
		names[i] = l.Name
	}
	require.Equal(t, []string{"river InsertTx", "outbox", "hand-written outbox on River",
		"river Insert (no caller tx)", "outbox (no caller tx)"}, names)
	for i, l := range report.Lanes {
		base := report.Lanes[0].Max.Rate
		if i >= 3 {
			base = report.Lanes[3].Max.Rate
		}
		require.InDelta(t, l.Max.Rate/base, l.RatioLikeForLike, 1e-9, l.Name)
		require.InDelta(t, l.Max.Rate/report.Lanes[2].Max.Rate, l.RatioHandWritten, 1e-9, l.Name)
	}
	// The targets of the lanes run: (g) and (h) are of lanes left out.
	targets := make([]string, len(report.Targets))
	for i, target := range report.Targets {
		targets[i], _, _ = strings.Cut(target.Name, " ")
	}
	require.Equal(t, []string{"(a)", "(b)", "(c)", "(d)", "(f)", "(i)", "(e)", "peak"}, targets)
	require.InDelta(t, report.Lanes[0].Max.Rate/2, report.OfferedRate, 1e-6)
	require.Positive(t, report.Batch.River.Rate)
	require.InDelta(t, report.Batch.Outbox.Rate/report.Batch.River.Rate, report.BatchRatio, 1e-9)
	require.Contains(t, res.stderr, "bench: lane 1 of 12: river InsertTx")

	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var left int
	require.NoError(t, conn.QueryRow(t.Context(),
		`SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'outboxd\_bench\_%'`).Scan(&left))
	require.Zero(t, left, "bench leaves no schema behind")
}

// outboxd bench with its default workers and callers runs on a server at
// PostgreSQL's default max_connections (100): its pools and a lane's
// sessions together fit. On a server that cannot take them, it says so in
// one line before it starts.
func TestBenchDefaultMaxConnections(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{Settings: []string{"max_connections=100"}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop(context.WithoutCancel(ctx))) })
	env := map[string]string{"DATABASE_URL": cluster.URL()}

	// Each lane opens every connection of its pool, so this holds as many
	// at once as a long run's busiest moment.
	res := runEnv(t, env, nil, "bench", "--count", "100", "--batch-count", "1000",
		"--lane", "outbox", "--lane", "hand-written outbox on River", "--json")
	require.Equal(t, 0, res.code, res.stderr)

	// A role of no privilege, which sees no backend_type of others' sessions.
	conn, err := pgx.Connect(ctx, cluster.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE ROLE bench_small LOGIN; GRANT CREATE ON DATABASE postgres TO bench_small")
	require.NoError(t, err)
	u, err := url.Parse(cluster.URL())
	require.NoError(t, err)
	u.User = url.User("bench_small")
	small := map[string]string{"DATABASE_URL": u.String()}
	// A closed session's backend leaves the server a moment after its
	// client: the counts below are exact once the runs before have gone.
	// settled waits until others hold exactly held sessions.
	settled := func(t *testing.T, held int) {
		t.Helper()
		require.Eventually(t, func() bool {
			var n int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n)
			return err == nil && n == held
		}, 30*time.Second, 20*time.Millisecond, "sessions of the runs before are still open")
	}

	t.Run("Busy", func(t *testing.T) {
		// 60 connections held by others (and the test's one) leave 39, 36
		// to a role that may not take the 3 slots reserved for superusers.
		settled(t, 0)
		others, err := pgxpool.New(ctx, cluster.URL()+"&pool_max_conns=60")
		require.NoError(t, err)
		defer others.Close()
		held := make([]*pgxpool.Conn, 60)
		for i := range held {
			held[i], err = others.Acquire(ctx)
			require.NoError(t, err)
			defer held[i].Release()
		}

		res := runEnv(t, env, nil, "bench", "--count", "100")
		require.Equal(t, 1, res.code, res.stderr)
		require.Equal(t, "outboxd: bench needs 63 connections with --workers 50 and --clients 16, and the server allows 39 "+
			"(max_connections 100, 61 in use by others): lower --workers or --clients, or raise max_connections\n", res.stderr)

		settled(t, 60) // the run above's session gone, the 60 held
		res = runEnv(t, small, nil, "bench", "--count", "100")
		require.Equal(t, 1, res.code, res.stderr)
		require.Equal(t, "outboxd: bench needs 63 connections with --workers 50 and --clients 16, and the server allows 36 "+
			"(max_connections 100, 3 reserved, 61 in use by others): lower --workers or --clients, or raise max_connections\n", res.stderr)
	})

	t.Run("RoleConnectionLimit", func(t *testing.T) {
		_, err = conn.Exec(ctx, "ALTER ROLE bench_small CONNECTION LIMIT 30")
		require.NoError(t, err)
		settled(t, 0)

		res := runEnv(t, small, nil, "bench", "--count", "100", "--workers", "10", "--clients", "4")
		require.Equal(t, 1, res.code, res.stderr)
		require.Equal(t, "outboxd: bench needs 36 connections with --workers 10 and --clients 4, and the server allows 30 "+
			"(the role's CONNECTION LIMIT 30, 0 in use by others): lower --workers or --clients, or raise max_connections\n", res.stderr)
	})
}

package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/metrics"
)

func TestDatabaseErrors(t *testing.T) {
	t.Parallel()
	d := metrics.NewDatabaseErrors()
	ctx := context.Background()
	d.TraceQueryEnd(ctx, nil, pgx.TraceQueryEndData{Err: &pgconn.PgError{Code: "53100"}})
	d.TraceBatchEnd(ctx, nil, pgx.TraceBatchEndData{Err: &pgconn.PgError{Code: "55P03"}})
	d.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{Err: &pgconn.PgError{Code: "53300"}})
	// The caller's mistakes, successes and cancelled statements are not
	// the database's trouble.
	d.TraceQueryEnd(ctx, nil, pgx.TraceQueryEndData{Err: &pgconn.PgError{Code: "23505"}})
	d.TraceQueryEnd(ctx, nil, pgx.TraceQueryEndData{})
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	d.TraceQueryEnd(cancelled, nil, pgx.TraceQueryEndData{Err: errors.Join(context.Canceled, &pgconn.PgError{Code: "57014"})})

	require.NoError(t, testutil.CollectAndCompare(d, strings.NewReader(`
# HELP outbox_database_errors_total Statements and connections of this process the database could not serve, by reason (connections, disk_full, down, lock_timeout, statement_timeout): workers, drain, River and API alike.
# TYPE outbox_database_errors_total counter
outbox_database_errors_total{reason="connections"} 1
outbox_database_errors_total{reason="disk_full"} 1
outbox_database_errors_total{reason="down"} 0
outbox_database_errors_total{reason="lock_timeout"} 1
outbox_database_errors_total{reason="statement_timeout"} 0
`)))
}

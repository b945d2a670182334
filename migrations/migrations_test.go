package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/migrations"
)

func TestNew(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.URL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// A nil Config migrates SchemaDefault; PendingSQL names the schema and
	// changes nothing.
	t.Run("NilConfigMeansDefaults", func(t *testing.T) {
		t.Parallel()

		m, err := migrations.New(pool, nil)
		require.NoError(t, err)
		sql, err := m.PendingSQL(ctx)
		require.NoError(t, err)
		require.Contains(t, sql, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{migrations.SchemaDefault}.Sanitize()+";\n")
	})

	t.Run("InvalidSchema", func(t *testing.T) {
		t.Parallel()

		_, err := migrations.New(pool, &migrations.Config{Schema: "Orders-Schema"})
		require.ErrorContains(t, err, `schema "Orders-Schema" must match`)
	})
}

func TestMigratorUp(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	// A migrator's connections may have seen the schema missing before Up
	// creates it: a program that checks its schema before migrating, or
	// serve with OUTBOX_AUTO_MIGRATE reading the migration state first.
	t.Run("AfterTheSchemaWasSeenMissing", func(t *testing.T) {
		t.Parallel()

		pool, err := pgxpool.New(ctx, testdb.URL(t))
		require.NoError(t, err)
		t.Cleanup(pool.Close)

		// A schema that never existed: looking it up leaves the
		// connection with a cached "no such schema".
		schema := fmt.Sprintf("mig_%d", time.Now().UnixNano())
		t.Cleanup(func() {
			_, err := pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			require.NoError(t, err)
		})
		_, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
		m, err := migrations.New(pool, &migrations.Config{Schema: schema})
		require.NoError(t, err)
		_, err = m.Up(ctx)
		require.NoError(t, err)
		st, err := m.Status(ctx)
		require.NoError(t, err)
		require.True(t, st.UpToDate())
	})

	// A server whose default isolation is not READ COMMITTED migrates too
	// (007 compiles the stored approval rules, which a change of the rules
	// may only do in READ COMMITTED).
	t.Run("SerializableByDefault", func(t *testing.T) {
		t.Parallel()

		cfg, err := pgxpool.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		schema := fmt.Sprintf("mig_ser_%d", time.Now().UnixNano())
		t.Cleanup(func() {
			_, err := pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			require.NoError(t, err)
		})
		m, err := migrations.New(pool, &migrations.Config{Schema: schema})
		require.NoError(t, err)
		_, err = m.Up(ctx)
		require.NoError(t, err)
		var level string
		require.NoError(t, pool.QueryRow(ctx, "SHOW transaction_isolation").Scan(&level))
		require.Equal(t, "serializable", level)
	})

	t.Run("TwiceIsANoOp", func(t *testing.T) {
		t.Parallel()

		pool, schema := testdb.MigratedSchema(t)
		m, err := migrations.New(pool, &migrations.Config{Schema: schema})
		require.NoError(t, err)
		res, err := m.Up(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Applied)
	})
}

// The row checks that migration 008 moved from CHECK constraints into the
// intent table's triggers refuse what the constraints refused, on insert and
// on update, with the same SQLSTATE and constraint name, and without the row
// in the message.
func TestRowChecks(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool, schema := testdb.MigratedSchema(t)
	table := pgx.Identifier{schema, "outbox_intent"}.Sanitize()

	// Raw SQL throughout, not testfactory.Intent: the table's refusal of a
	// hand-written INSERT or UPDATE is what's tested.
	insert := func(namespace, key, effect, args, keySource string, requestedBy *string) error {
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (namespace, key, effect, args, key_source, requested_by)
			VALUES ($1, $2, $3, $4::jsonb, $5, $6)`, namespace, key, effect, args, keySource, requestedBy)
		return err
	}
	long := strings.Repeat("x", 256)
	cases := []struct {
		name       string
		constraint string
		err        error
	}{
		{"NamespaceEmpty", "outbox_intent_namespace_check", insert("", "k", "noop", `{}`, "explicit", nil)},
		{"NamespaceSpace", "outbox_intent_namespace_check", insert("a b", "k", "noop", `{}`, "explicit", nil)},
		{"NamespaceTooLong", "outbox_intent_namespace_check", insert(long[:65], "k", "noop", `{}`, "explicit", nil)},
		{"KeyNonASCII", "outbox_intent_key_check", insert("ns", "clé", "noop", `{}`, "explicit", nil)},
		{"KeyTooLong", "outbox_intent_key_check", insert("ns", long, "noop", `{}`, "explicit", nil)},
		{"EffectUpperCase", "outbox_intent_effect_check", insert("ns", "k", "Noop", `{}`, "explicit", nil)},
		{"EffectLeadingDigit", "outbox_intent_effect_check", insert("ns", "k", "1noop", `{}`, "explicit", nil)},
		{"ArgsNotAnObject", "outbox_intent_args_check", insert("ns", "k", "noop", `[{"card": "4242"}]`, "explicit", nil)},
		{"KeySource", "outbox_intent_key_source_check", insert("ns", "k", "noop", `{}`, "guessed", nil)},
		{"RequestedByTooLong", "outbox_intent_requested_by_check", insert("ns", "k", "noop", `{}`, "explicit", &long)},
		// PostgreSQL checks constraints in the order of their names.
		{"SeveralNameTheFirst", "outbox_intent_args_check", insert("a b", "k", "noop", `[1]`, "explicit", nil)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var pgErr *pgconn.PgError
			require.ErrorAs(t, c.err, &pgErr)
			require.Equal(t, "23514", pgErr.Code)
			require.Equal(t, c.constraint, pgErr.ConstraintName)
			require.Equal(t, `new row for relation "outbox_intent" violates check constraint "`+c.constraint+`"`, pgErr.Message)
			require.NotContains(t, pgErr.Message+pgErr.Detail, "4242")
		})
	}

	// NULL is the columns' NOT NULL constraints' to refuse, not the row
	// checks'.
	require.NoError(t, insert("ns", "k", "noop", `{}`, "explicit", nil))
	var pgErr *pgconn.PgError
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (namespace, key, effect, args) VALUES ('ns', NULL, 'noop', '{}')`)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23502", pgErr.Code)

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
	require.Equal(t, 1, n, "only the valid row was written")

	// An update that names a checked column is checked too; outbox's own
	// updates (state, job, outcome) do not fire the check.
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET key = 'has space' WHERE key = 'k'`)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "outbox_intent_key_check", pgErr.ConstraintName)
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET args = '"x"' WHERE key = 'k'`)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "outbox_intent_args_check", pgErr.ConstraintName)
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET state = 'bogus' WHERE key = 'k'`)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "outbox_intent_state_check", pgErr.ConstraintName)
	tag, err := pool.Exec(ctx, `UPDATE `+table+` SET key = 'k2', args = '{"n": 1}' WHERE key = 'k'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// TestMigrateLiveTable runs 014 and 015 on a table large enough for 015 to
// build its indexes CONCURRENTLY outside a transaction, while a caller
// keeps enqueueing, then back down: every index valid at each end, and the
// intents undispatched before the migration, or enqueued during it, each
// dispatched once by the new drain.
func TestMigrateLiveTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testdb.MigratedSchema(t)
	table := pgx.Identifier{schema, "outbox_intent"}.Sanitize()
	m, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	for want := migrations.Latest(); want >= 14; want-- {
		res, err := m.Down(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, want, res.Applied[0].Version)
	}

	// 12,000 intents, one in twelve pending without a job, as 013 leaves
	// them: one statement each (testfactory.Intent writes one row, and
	// the current schema's).
	const n, undispatched = 12_000, 1_000
	_, err = pool.Exec(ctx, `INSERT INTO `+table+` (namespace, key, effect, args)
		SELECT 'default', 'old-' || g, 'noop', '{}' FROM generate_series(1, $1) g`, n)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET state = 'succeeded', job_id = 0, completed_at = now() WHERE id % 12 <> 0`)
	require.NoError(t, err)

	indexes := func() []string {
		rows, err := pool.Query(ctx, `SELECT c.relname || CASE WHEN i.indisvalid THEN '' ELSE ' (invalid)' END
			FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = $1::regclass ORDER BY 1`, table)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	before := []string{"outbox_intent_awaiting_approval", "outbox_intent_namespace_key", "outbox_intent_namespace_state",
		"outbox_intent_pkey", "outbox_intent_prunable", "outbox_intent_undispatched"}
	require.Equal(t, before, indexes())

	// A caller enqueueing, one intent a transaction, throughout.
	stop := make(chan struct{})
	written := make(chan int)
	go func() {
		i := 0
		defer func() { written <- i }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Raw SQL, not testfactory.Intent: an insert racing the
			// migration, on the schema as it stands at that moment.
			if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (namespace, key, effect, args) VALUES ('default', $1, 'noop', '{}')`,
				fmt.Sprintf("live-%d", i)); err != nil {
				t.Errorf("enqueue during the migration: %v", err)
				return
			}
			i++
		}
	}()
	res, err := m.Up(ctx)
	close(stop)
	live := <-written
	require.NoError(t, err)
	require.Len(t, res.Applied, migrations.Latest()-13)
	require.True(t, res.Applied[1].Version == 15 && res.Applied[1].Name == "hot_intent_indexes")
	require.Positive(t, live, "enqueues went on during the migration")
	require.Equal(t, []string{"outbox_intent_approval", "outbox_intent_created_at", "outbox_intent_namespace_id",
		"outbox_intent_namespace_key", "outbox_intent_pkey", "outbox_intent_txid"}, indexes())

	e, err := noop.New(&noop.Config{Pool: pool, Schema: schema})
	require.NoError(t, err)
	reg, err := effects.NewRegistry(e)
	require.NoError(t, err)
	d, err := dispatcher.New(pool, &dispatcher.Config{Effects: reg, Schema: schema, DrainBatchSize: 500})
	require.NoError(t, err)
	dispatched, err := d.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, undispatched+live, dispatched)
	var pending, jobIntents int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE job_id IS NULL`).Scan(&pending))
	require.Zero(t, pending)
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(coalesce(jsonb_array_length(args->'intent_ids'), 1)), 0) FROM `+
		pgx.Identifier{schema, "river_job"}.Sanitize()).Scan(&jobIntents))
	require.Equal(t, undispatched+live, jobIntents, "one job each")
	again, err := d.Drain(ctx)
	require.NoError(t, err)
	require.Zero(t, again)

	// And back, concurrently too.
	for want := migrations.Latest(); want >= 14; want-- {
		res, err := m.Down(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, want, res.Applied[0].Version)
	}
	require.Equal(t, before, indexes())
	var hasTxid bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'outbox_intent' AND column_name = 'txid')`, schema).Scan(&hasTxid))
	require.False(t, hasTxid)
}

// Every migration from CompatibilityRequiredFrom on says whether the
// previous release's serve may run beside it (docs/operations.md,
// "Upgrading"): a rolling upgrade applies migrate up while old replicas
// serve, so a migration that breaks them must say so, and why.
func TestMigrationCompatibility(t *testing.T) {
	t.Parallel()
	for _, m := range migrations.All() {
		if m.Version < migrations.CompatibilityRequiredFrom {
			continue
		}
		ok := m.Compatibility == migrations.CompatibilitySafe ||
			(strings.HasPrefix(m.Compatibility, migrations.CompatibilityBreakingPrefix) && len(m.Compatibility) > len(migrations.CompatibilityBreakingPrefix)+10)
		require.True(t, ok, "migration %03d_%s.up.sql must have a line %q or \"-- compatibility: breaking: <why, and what the upgrade must do>\", not %q",
			m.Version, m.Name, "-- compatibility: "+migrations.CompatibilitySafe, m.Compatibility)
	}
}

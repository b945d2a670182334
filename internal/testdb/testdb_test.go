package testdb_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
)

func TestMain(m *testing.M) {
	testdb.Main(m)
}

// namePattern is the form of generated schema and database names.
var namePattern = regexp.MustCompile(`^t_[a-z0-9]{10}$`)

func TestURL(t *testing.T) {
	t.Parallel()

	config, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	require.NotEmpty(t, config.Host)
}

func TestPool(t *testing.T) {
	t.Parallel()

	pool := testdb.Pool(t)
	require.Same(t, pool, testdb.Pool(t))
	require.EqualValues(t, 40, pool.Config().MaxConns)

	var one int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
}

func TestSchema(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := testdb.Pool(t)

	schemaExists := func(t *testing.T, schema string) bool {
		t.Helper()

		var exists bool
		err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists)
		require.NoError(t, err)
		return exists
	}

	var schema, otherSchema string
	t.Run("Create", func(t *testing.T) {
		schema = testdb.Schema(t)
		otherSchema = testdb.Schema(t)
		require.Regexp(t, namePattern, schema)
		require.NotEqual(t, schema, otherSchema)
		require.True(t, schemaExists(t, schema))

		// Objects in the schema don't stop it from being dropped.
		_, err := pool.Exec(ctx, "CREATE TABLE "+schema+".widget (id bigint PRIMARY KEY)")
		require.NoError(t, err)
	})

	require.False(t, schemaExists(t, schema), "schema %s still exists after cleanup", schema)
	require.False(t, schemaExists(t, otherSchema), "schema %s still exists after cleanup", otherSchema)
}

func TestDatabase(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := testdb.Pool(t)

	databaseExists := func(t *testing.T, database string) bool {
		t.Helper()

		var exists bool
		err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", database).Scan(&exists)
		require.NoError(t, err)
		return exists
	}

	var (
		database string
		leftOpen *pgx.Conn
	)
	t.Run("Create", func(t *testing.T) {
		dbURL := testdb.Database(t)

		config, err := pgx.ParseConfig(dbURL)
		require.NoError(t, err)
		database = config.Database
		require.Regexp(t, namePattern, database)
		require.True(t, databaseExists(t, database))

		// Everything but the database is the same as the main URL.
		mainConfig, err := pgx.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		require.Equal(t, mainConfig.Host, config.Host)
		require.Equal(t, mainConfig.Port, config.Port)
		require.Equal(t, mainConfig.User, config.User)

		conn, err := pgx.Connect(ctx, dbURL)
		require.NoError(t, err)
		defer conn.Close(ctx)

		var current string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&current))
		require.Equal(t, database, current)

		_, err = conn.Exec(ctx, "CREATE TABLE widget (id bigint PRIMARY KEY)")
		require.NoError(t, err)

		// A connection that's still open when cleanup runs mustn't stop
		// the database from being dropped.
		leftOpen, err = pgx.Connect(ctx, dbURL)
		require.NoError(t, err)
	})

	require.False(t, databaseExists(t, database), "database %s still exists after cleanup", database)

	// The connection left open was terminated.
	require.Error(t, leftOpen.Ping(ctx))
	_ = leftOpen.Close(ctx)
}

// Package testdb gives tests a PostgreSQL database to work in.
//
// Every package whose tests need a database calls Main from its TestMain:
//
//	func TestMain(m *testing.M) {
//		testdb.Main(m)
//	}
//
// Tests then use Pool for a shared connection pool, and Schema or Database for
// an isolated place to create objects in that's cleaned up when the test ends.
// Migrating a schema is what costs, so, as River's riverdbtest does, a binary
// migrates few: TestTx is a rolled-back transaction in the binary's one
// shared migrated schema, for tests that need no commit and no
// LISTEN/NOTIFY; MigratedSchema a migrated schema of the test's own, emptied
// with DELETE and reused by a later test when it's done; NewEnv noop
// effects and a client on one, the start of most tests. Run drops them all
// when the tests are done.
//
// The database is the one in TEST_DATABASE_URL when it's set. Otherwise, Main
// starts a throwaway PostgreSQL cluster (see package pgcluster) for the test
// binary, sets TEST_DATABASE_URL to it for the binary's examples, and stops
// it when the tests are done, so tests work without any setup on machines
// with PostgreSQL installed.
package testdb

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/pgcluster"
)

const (
	// cleanupTimeout bounds each cleanup query. Cleanups can't use the test's
	// context, which is cancelled before they run.
	cleanupTimeout = 30 * time.Second

	// envDatabaseURL is the environment variable naming an existing database
	// to use instead of a throwaway cluster.
	envDatabaseURL = "TEST_DATABASE_URL"

	// nameRandomLen is the number of random characters in generated schema
	// and database names. Schema names end up in NOTIFY channel names, which
	// share Postgres' 63 byte identifier limit with whatever they're combined
	// with, so they're kept short; 36^10 names still make collisions
	// vanishingly unlikely.
	nameRandomLen = 10

	// poolMaxConns is the size of the pool returned by Pool. It's more than
	// pgxpool's default (the number of CPUs, as low as 2 in CI) because tests
	// run in parallel and some hold connections for a long time (listeners,
	// open transactions), while staying well under max_connections when
	// several test binaries share one server.
	poolMaxConns = 40
)

var (
	// databaseURL is the URL of the test binary's database, set by Main.
	databaseURL string

	poolMu  sync.Mutex
	pool    *pgxpool.Pool
	poolErr error
)

// Main is called from a package's TestMain: testdb.Main(m). It finds the
// database (TEST_DATABASE_URL when set, else starts a pgcluster for this test
// binary), runs the tests, stops the cluster, and exits with the tests' code.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the os.Exit, for a TestMain with cleanups of its own.
// It returns the tests' exit code.
//
// The tests run at go test's -parallel (GOMAXPROCS): more at once is not
// faster on a small machine, where PostgreSQL's CPU is the bound and each
// test in flight holds a migrated schema of its own and, most, a dispatcher
// polling its queues (measured over six packages: -parallel 8 took
// PostgreSQL 60% more CPU than 2, and longer).
func Run(m *testing.M) int {
	return RunParallel(m, 0)
}

// parallelMinConnections is the max_connections a TEST_DATABASE_URL server
// needs before RunParallel raises -parallel: test binaries run side by
// side, each with its pools, listeners and dispatchers. The throwaway
// cluster has as many; README's development section asks for them.
const parallelMinConnections = 300

// RunParallel is Run with n tests at once unless the command line sets
// -parallel, for a package whose tests wait on processes and timeouts
// rather than on PostgreSQL or the CPU (the integration tests). n of 0
// leaves go test's default.
func RunParallel(m *testing.M, n int) int {
	databaseURL = os.Getenv(envDatabaseURL)
	if err := raiseParallel(n); err != nil {
		fmt.Fprintf(os.Stderr, "testdb: %s\n", err)
		return 2
	}

	if databaseURL == "" {
		cluster, err := startCluster()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testdb: %s\n", err)
			return 1
		}
		defer func() {
			if err := cluster.Stop(context.Background()); err != nil {
				fmt.Fprintf(os.Stderr, "testdb: error stopping throwaway PostgreSQL cluster: %s\n", err)
			}
		}()
		databaseURL = cluster.URL()
		// Examples connect as a user's code would, to the database the
		// environment names, since they cannot call Pool.
		if err := os.Setenv(envDatabaseURL, databaseURL); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: %s\n", err)
			return 1
		}
	}

	// Registered after the cluster's deferred Stop, so it runs first.
	defer closePool()

	code := m.Run()
	if err := dropSchemas(); err != nil {
		fmt.Fprintf(os.Stderr, "testdb: %s\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// raiseParallel sets -test.parallel to n unless the command line set it, or
// the server in TEST_DATABASE_URL has too few connections for it (then it
// says so, and the tests run as go test would run them).
func raiseParallel(n int) error {
	if n <= runtime.GOMAXPROCS(0) {
		return nil
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return nil
	}
	if databaseURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return nil // the first test to ask for the database reports it
		}
		defer conn.Close(context.Background())
		var maxConns int
		if err := conn.QueryRow(ctx, "SELECT current_setting('max_connections')::int").Scan(&maxConns); err != nil {
			return nil
		}
		if maxConns < parallelMinConnections {
			fmt.Fprintf(os.Stderr, "testdb: max_connections is %d, under the %d that -parallel %d needs: running go test's default -parallel\n",
				maxConns, parallelMinConnections, n)
			return nil
		}
	}
	return flag.Set("test.parallel", strconv.Itoa(n))
}

// startCluster starts the throwaway cluster used when TEST_DATABASE_URL isn't
// set.
func startCluster() (*pgcluster.Cluster, error) {
	binDir, err := pgcluster.FindBinDir()
	if err != nil {
		return nil, fmt.Errorf("%s is not set and a throwaway PostgreSQL cluster can't be started (%w); "+
			"set %s to a PostgreSQL database (like postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) "+
			"or install PostgreSQL", envDatabaseURL, err, envDatabaseURL)
	}

	start := time.Now()
	cluster, err := pgcluster.Start(context.Background(), &pgcluster.Config{BinDir: binDir})
	if err != nil {
		return nil, fmt.Errorf("error starting throwaway PostgreSQL cluster (or set %s to use an existing database): %w", envDatabaseURL, err)
	}

	// The one line of output, so that the time it adds to a test run isn't
	// a mystery.
	fmt.Fprintf(os.Stderr, "testdb: started throwaway PostgreSQL cluster at %s in %s (set %s to use an existing database)\n",
		cluster.URL(), time.Since(start).Round(time.Millisecond), envDatabaseURL)
	return cluster, nil
}

// URL returns the database URL for the current test binary (valid after Main
// started).
func URL(tb testing.TB) string {
	tb.Helper()

	if databaseURL == "" {
		tb.Fatal("testdb: no database URL; call testdb.Main(m) from the package's TestMain")
	}
	return databaseURL
}

// Pool returns a *pgxpool.Pool shared by the package's tests (created lazily
// once, MaxConns 40; closed by Main at the end).
//
// Tests mustn't close it. If it can't be created, the test fails, as does
// every later test asking for it.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()

	URL(tb) // fails the test without Main
	pool, err := sharedPool()
	if err != nil {
		tb.Fatalf("testdb: %s", err)
	}
	return pool
}

// sharedPool is Pool without a test, for Run's cleanup.
func sharedPool() (*pgxpool.Pool, error) {
	poolMu.Lock()
	defer poolMu.Unlock()

	if pool == nil && poolErr == nil {
		pool, poolErr = newPool(databaseURL)
	}
	return pool, poolErr
}

// newPool creates the pool returned by Pool.
func newPool(dbURL string) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("error parsing database URL: %w", err)
	}
	config.MaxConns = poolMaxConns

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("error creating pool: %w", err)
	}
	// Creating a pool doesn't connect, so check now that the database is
	// reachable. Otherwise every test would fail with its own, less
	// obvious, error.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("error connecting to test database: %w", err)
	}
	return pool, nil
}

// closePool closes the pool returned by Pool if it was created.
func closePool() {
	poolMu.Lock()
	defer poolMu.Unlock()

	if pool != nil {
		pool.Close()
		pool = nil
	}
}

// Schema creates a fresh, uniquely named empty schema (name like "t_" + 10
// random lowercase alnum chars, short because it is used inside Postgres
// NOTIFY channel names) and registers tb.Cleanup to `DROP SCHEMA ... CASCADE`.
// Returns its name.
//
// The name needs no quoting in SQL. The schema isn't put on anyone's
// search_path; callers qualify names with it or set search_path themselves.
func Schema(tb testing.TB) string {
	tb.Helper()

	pool := Pool(tb)
	schema := randomName()
	quoted := pgx.Identifier{schema}.Sanitize()

	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()

	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
		tb.Fatalf("testdb: error creating schema %s: %s", schema, err)
	}

	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()

		// A process the test started may still be at work in the schema
		// (a serve being stopped, its last drain): a deadlock with it is
		// tried again, the drop being the only thing left to do.
		var err error
		for range 5 {
			if _, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE"); !isDeadlock(err) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			tb.Errorf("testdb: error dropping schema %s: %s", schema, err)
		}
	})

	return schema
}

// Database creates a fresh database (for tests that need a whole database,
// e.g. ones that restart/terminate backends), registers cleanup that
// terminates its backends (pg_terminate_backend) and drops it (DROP DATABASE
// ... WITH (FORCE)), and returns its URL.
//
// The URL is the test binary's URL with only the database name changed, so it
// connects to the same server with the same user and parameters.
func Database(tb testing.TB) string {
	tb.Helper()

	pool := Pool(tb)
	database := randomName()
	quoted := pgx.Identifier{database}.Sanitize()

	dbURL, err := replaceDatabase(URL(tb), database)
	if err != nil {
		tb.Fatalf("testdb: %s", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()

	// A fixed template keeps this independent of whatever the server's
	// default is. template1 could have been changed too, but that's the
	// server owner's business.
	if _, err := pool.Exec(ctx, "CREATE DATABASE "+quoted+" TEMPLATE template1"); err != nil {
		tb.Fatalf("testdb: error creating database %s: %s", database, err)
	}

	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()

		// Connections the test left open would make DROP DATABASE fail.
		// WITH (FORCE) terminates them too, but terminating them
		// explicitly first is cheap, and a failure to do so shows up as
		// its own error instead of as a failed drop.
		_, err := pool.Exec(ctx,
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
			database)
		if err != nil {
			tb.Errorf("testdb: error terminating connections to database %s: %s", database, err)
		}

		if _, err := pool.Exec(ctx, "DROP DATABASE IF EXISTS "+quoted+" WITH (FORCE)"); err != nil {
			tb.Errorf("testdb: error dropping database %s: %s", database, err)
		}
	})

	return dbURL
}

// replaceDatabase returns connString with its database name replaced, keeping
// everything else. connString may be a URL or a keyword/value string, the two
// forms pgx accepts.
func replaceDatabase(connString, database string) (string, error) {
	var replaced string
	if scheme, rest, ok := strings.Cut(connString, "://"); ok && (scheme == "postgres" || scheme == "postgresql") {
		// Not url.Parse and URL.String: Go's URL parser rejects the
		// multi-host URLs ("postgres://host1:5432,host2:5432/db") that pgx
		// and libpq accept. The authority ends at the first '/', '?', or
		// '#', and the path (the database name) at the first '?' or '#'.
		authority, tail := rest, ""
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority, tail = rest[:i], rest[i:]
		}
		if strings.HasPrefix(tail, "/") {
			if i := strings.IndexAny(tail, "?#"); i >= 0 {
				tail = tail[i:]
			} else {
				tail = ""
			}
		}

		// A dbname query parameter overrides the path in pgx and libpq.
		if rawQuery, ok := strings.CutPrefix(tail, "?"); ok {
			rawQuery, fragment, _ := strings.Cut(rawQuery, "#")
			query, err := url.ParseQuery(rawQuery)
			if err != nil {
				return "", fmt.Errorf("error parsing database URL query: %w", err)
			}
			if query.Has("dbname") {
				query.Set("dbname", database)
				tail = "?" + query.Encode()
				if fragment != "" {
					tail += "#" + fragment
				}
			}
		}

		replaced = scheme + "://" + authority + "/" + url.PathEscape(database) + tail
	} else {
		// In keyword/value strings the last occurrence of a keyword wins.
		replaced = strings.TrimSpace(connString) + " dbname='" + database + "'"
	}

	// Check that pgx reads it back as intended rather than trusting the
	// string manipulation above.
	config, err := pgx.ParseConfig(replaced)
	if err != nil {
		return "", fmt.Errorf("error parsing database URL with database replaced: %w", err)
	}
	if config.Database != database {
		return "", fmt.Errorf("database URL with database replaced has database %q instead of %q", config.Database, database)
	}
	return replaced, nil
}

// randomName returns a name for a schema or database: "t_" followed by random
// lowercase letters and digits.
func randomName() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

	var name strings.Builder
	name.WriteString("t_")
	for range nameRandomLen {
		name.WriteByte(alphabet[rand.IntN(len(alphabet))])
	}
	return name.String()
}

// isDeadlock reports whether err is PostgreSQL's deadlock_detected.
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DeadlockDetected
}

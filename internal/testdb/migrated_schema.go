package testdb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/migrations"
)

// A migrated schema costs River's migrations and outbox's fifteen, several
// hundred milliseconds on a loaded machine, where emptying one costs a few:
// as River's riverdbtest does, a test binary keeps the schemas its tests
// are done with and hands them, emptied, to the next tests that ask.
//
// A schema is emptied when it comes back, not when it is handed out, so an
// idle schema is always ready and one that can't be emptied, or whose
// objects a test changed (a down migration, a grant left behind, a table
// of its own), is dropped on the spot instead of being handed to a test
// that would trip on it.
type migratedSchema struct {
	// fingerprint is the catalog's description of the schema's objects
	// right after it was migrated (see fingerprintSQL).
	fingerprint string
	name        string
	// seeds are the rows the migrations wrote into the tables, put back
	// after each emptying: table name to its rows as a JSON array.
	seeds map[string]string
}

var (
	schemasMu sync.Mutex
	// idleSchemas are migrated schemas no test is using, emptied.
	idleSchemas []*migratedSchema
	// liveSchemas are every migrated schema of this binary not yet dropped,
	// idle or in use, so that Run drops them all at the end.
	liveSchemas = map[string]bool{}

	// schemasMigrated and schemasReused count MigratedSchema's two ways,
	// for the line Run prints under -v.
	schemasMigrated atomic.Int64
	schemasReused   atomic.Int64
)

// MigratedSchema returns the package's shared pool and the name of a schema
// with River's and outbox's migrations applied and every table empty (but
// for the rows the migrations themselves write), for the test's use alone.
// When the test ends the schema is emptied (see empty) and kept for a
// later test of the same binary, or dropped if the test changed its
// objects; Run drops the binary's schemas at the end.
//
// A test that needs no commit and no LISTEN/NOTIFY is cheaper still in
// TestTx.
func MigratedSchema(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool := Pool(tb)

	schemasMu.Lock()
	var s *migratedSchema
	if n := len(idleSchemas); n > 0 {
		s, idleSchemas = idleSchemas[n-1], idleSchemas[:n-1]
	}
	schemasMu.Unlock()

	if s != nil {
		schemasReused.Add(1)
	} else {
		var err error
		if s, err = newMigratedSchema(pool); err != nil {
			tb.Fatalf("testdb: %v", err)
		}
		schemasMigrated.Add(1)
	}

	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := s.checkIn(ctx, pool); err != nil {
			tb.Errorf("testdb: %v", err)
		}
	})
	return pool, s.name
}

// newMigratedSchema creates and migrates a schema, and records what a reuse
// compares and restores.
func newMigratedSchema(pool *pgxpool.Pool) (*migratedSchema, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()

	s := &migratedSchema{name: randomName(), seeds: map[string]string{}}
	schemasMu.Lock()
	liveSchemas[s.name] = true
	schemasMu.Unlock()

	migrator, err := migrations.New(pool, &migrations.Config{Schema: s.name})
	if err != nil {
		return nil, fmt.Errorf("error creating migrator: %w", err)
	}
	if _, err := migrator.Up(ctx); err != nil {
		return nil, fmt.Errorf("error migrating schema %s: %w", s.name, err)
	}
	// The sandbox's fixture table, which the tests' noop effects record in:
	// it is the sandbox's, so no migration creates it.
	if err := noop.EnsureTable(ctx, pool, s.name); err != nil {
		return nil, err
	}

	if err := pool.QueryRow(ctx, fingerprintSQL, s.name).Scan(&s.fingerprint); err != nil {
		return nil, fmt.Errorf("error reading schema %s's catalog: %w", s.name, err)
	}
	for _, table := range tables(ctx, pool, s.name) {
		var rows *string
		if err := pool.QueryRow(ctx, "SELECT json_agg(t) FROM "+pgx.Identifier{s.name, table}.Sanitize()+" t").Scan(&rows); err != nil {
			return nil, fmt.Errorf("error reading the rows of %s.%s: %w", s.name, table, err)
		}
		if rows != nil {
			s.seeds[table] = *rows
		}
	}
	return s, nil
}

// tables returns the names of schema's tables, sorted; nil on error (the
// caller's next statement reports it).
func tables(ctx context.Context, pool *pgxpool.Pool, schema string) []string {
	rows, err := pool.Query(ctx, `SELECT relname FROM pg_class
		WHERE relnamespace = $1::regnamespace AND relkind IN ('r', 'p') ORDER BY relname`, schema)
	if err != nil {
		return nil
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil
	}
	return names
}

// checkIn empties the schema a test is done with and makes it idle, or
// drops it when it can't be reused as it was first handed out.
func (s *migratedSchema) checkIn(ctx context.Context, pool *pgxpool.Pool) error {
	err := s.empty(ctx, pool)
	if err == nil {
		var fingerprint string
		if err = pool.QueryRow(ctx, fingerprintSQL, s.name).Scan(&fingerprint); err == nil && fingerprint == s.fingerprint {
			schemasMu.Lock()
			idleSchemas = append(idleSchemas, s)
			schemasMu.Unlock()
			return nil
		}
	}
	// Changed, or not emptied (a lock still held by something the test
	// left running): not anyone else's problem.
	return dropMigratedSchema(ctx, pool, s.name)
}

// empty deletes every row of the schema's tables, starts its sequences
// over, and puts back the rows the migrations wrote, in one transaction.
//
// DELETE, not TRUNCATE: TRUNCATE gives each table and index a new file and
// unlinks the old, and that file churn, the file system's inode work, was
// most of PostgreSQL's CPU in the test suite (perf: 61% of it in the
// kernel, on a 2-core machine the suite is bound by). The tables hold a
// test's few rows, and no foreign key orders the deletes.
//
// LOCK first, as TRUNCATE would: ACCESS EXCLUSIVE waits for the last
// transaction of a process the test stopped; lock_timeout bounds that wait
// for one the test left running, whose schema is then dropped. The
// sequences start over, as with RESTART IDENTITY: a test may count on the
// ids of a fresh table. Deleting outbox_approval_rule's rows rebuilds the
// approval trigger for no rules, as on a fresh schema (checkIn's
// fingerprint then compares).
func (s *migratedSchema) empty(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '5s'"); err != nil {
			return err
		}
		names := tables(ctx, pool, s.name)
		if len(names) == 0 {
			return fmt.Errorf("schema %s has no tables", s.name)
		}
		quoted := make([]string, len(names))
		deletes := make([]string, len(names))
		for i, table := range names {
			quoted[i] = pgx.Identifier{s.name, table}.Sanitize()
			deletes[i] = "DELETE FROM " + quoted[i]
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(quoted, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return fmt.Errorf("error emptying schema %s: %w", s.name, err)
		}
		if _, err := tx.Exec(ctx, strings.Join(deletes, "; ")); err != nil {
			return fmt.Errorf("error emptying schema %s: %w", s.name, err)
		}
		if _, err := tx.Exec(ctx, `SELECT setval(c.oid, s.seqstart, false) FROM pg_class c
			JOIN pg_sequence s ON s.seqrelid = c.oid WHERE c.relnamespace = $1::regnamespace`, s.name); err != nil {
			return fmt.Errorf("error restarting the sequences of schema %s: %w", s.name, err)
		}
		for _, table := range slices.Sorted(maps.Keys(s.seeds)) {
			quoted := pgx.Identifier{s.name, table}.Sanitize()
			if _, err := tx.Exec(ctx, "INSERT INTO "+quoted+" OVERRIDING SYSTEM VALUE SELECT * FROM json_populate_recordset(NULL::"+quoted+", $1)", s.seeds[table]); err != nil {
				return fmt.Errorf("error restoring the rows of %s.%s: %w", s.name, table, err)
			}
		}
		return nil
	})
}

// dropMigratedSchema drops a schema of MigratedSchema or TestTx, trying
// again on a deadlock with a process still at work in it.
func dropMigratedSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var err error
	for range 5 {
		if _, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); !isDeadlock(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("error dropping schema %s: %w", schema, err)
	}
	schemasMu.Lock()
	delete(liveSchemas, schema)
	schemasMu.Unlock()
	return nil
}

// dropSchemas drops every migrated schema of the binary still there, at the
// end of Run, so that nothing is left behind.
func dropSchemas() error {
	schemasMu.Lock()
	names := slices.Sorted(maps.Keys(liveSchemas))
	idleSchemas = nil
	schemasMu.Unlock()
	if len(names) == 0 {
		return nil
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "testdb: %d schemas migrated, %d reused\n", schemasMigrated.Load(), schemasReused.Load())
	}
	pool, err := sharedPool()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var errs []error
	for _, name := range names {
		errs = append(errs, dropMigratedSchema(ctx, pool, name))
	}
	return errors.Join(errs...)
}

// fingerprintSQL describes the objects of schema $1 as the catalog holds
// them: tables, columns, indexes, constraints, triggers, functions, types,
// policies and their privileges. A schema whose description changed while
// a test used it is not reused.
const fingerprintSQL = `SELECT md5(coalesce(string_agg(d, E'\n' ORDER BY d), '')) FROM (
	SELECT 'schema ' || coalesce(nspacl::text, '') || ' ' || nspowner::regrole::text AS d
		FROM pg_namespace WHERE oid = $1::regnamespace
	UNION ALL
	SELECT 'rel ' || relname || ' ' || relkind::text || ' ' || relpersistence::text || ' ' || relrowsecurity::text || ' '
			|| coalesce(reloptions::text, '') || ' ' || coalesce(relacl::text, '') || ' ' || relowner::regrole::text
			|| CASE WHEN relkind = 'i' THEN ' ' || pg_get_indexdef(oid) ELSE '' END
			|| CASE WHEN relkind IN ('v', 'm') THEN ' ' || pg_get_viewdef(oid) ELSE '' END
		FROM pg_class WHERE relnamespace = $1::regnamespace
	UNION ALL
	SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
			|| ' ' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '') || ' ' || coalesce(a.attacl::text, '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT 'con ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
		FROM pg_constraint WHERE connamespace = $1::regnamespace
	UNION ALL
	SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text
		FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal
	UNION ALL
	SELECT 'func ' || proname || '(' || pg_get_function_identity_arguments(oid) || ') ' || md5(prosrc)
			|| ' ' || coalesce(proacl::text, '') || ' ' || coalesce(proconfig::text, '') || ' ' || proowner::regrole::text
		FROM pg_proc WHERE pronamespace = $1::regnamespace
	UNION ALL
	SELECT 'type ' || typname || ' ' || typtype::text FROM pg_type WHERE typnamespace = $1::regnamespace
	UNION ALL
	SELECT 'policy ' || p.polname || ' ' || coalesce(pg_get_expr(p.polqual, p.polrelid), '')
		FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = $1::regnamespace
) objects`

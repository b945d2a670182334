// Package migrations holds outbox's embedded SQL migrations and applies them,
// after River's own, in one schema under an advisory lock.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

//go:embed *.sql
var files embed.FS

// SchemaDefault is the schema used when none is given.
const SchemaDefault = "outbox"

// Migration is one of outbox's own migrations.
type Migration struct {
	// Name is derived from the file name: "intents" for 001_intents.up.sql.
	Name string
	// Version is the migration's number: 1 for 001_intents.up.sql.
	Version int
	// NoTransaction is set for a migration whose files start with the line
	// "-- outbox:no-transaction": its statements (CREATE INDEX
	// CONCURRENTLY, which PostgreSQL refuses in a transaction) run one at
	// a time outside a transaction, and it is recorded after the last.
	// Its files hold no semicolon but those ending statements, each at the
	// end of a line.
	NoTransaction bool
	// Compatibility is what the migration's up file says of the previous
	// release's serve running while, and after, it is applied: its
	// "-- compatibility: " line, CompatibilitySafe or "breaking: " and
	// why (docs/operations.md, "Upgrading"). Empty for the migrations
	// written before the rule (CompatibilityRequiredFrom).
	Compatibility string

	down string
	up   string
}

// noTransactionMarker starts a migration that runs outside a transaction.
const noTransactionMarker = "-- outbox:no-transaction\n"

// statements splits a no-transaction migration's SQL into its statements.
func statements(sql string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(sql) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			if st := strings.TrimSpace(cur.String()); st != ";" {
				out = append(out, st)
			}
			cur.Reset()
		}
	}
	if st := strings.TrimSpace(cur.String()); st != "" {
		out = append(out, st)
	}
	return out
}

var fileRE = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.(up|down)\.sql$`)

// CompatibilityRequiredFrom is the first migration whose up file must name
// its compatibility with the previous release (a line "-- compatibility:
// safe with the previous release", or "-- compatibility: breaking: " and
// why); TestMigrationCompatibility enforces it.
const CompatibilityRequiredFrom = 14

// CompatibilitySafe is the compatibility of a migration that the previous
// release's serve runs beside: a rolling upgrade may apply it while old
// replicas serve.
const CompatibilitySafe = "safe with the previous release"

// CompatibilityBreakingPrefix starts the compatibility of a migration the
// previous release's serve cannot run beside; the rest says why, and what
// the upgrade must do instead.
const CompatibilityBreakingPrefix = "breaking: "

var compatibilityRE = regexp.MustCompile(`(?m)^-- compatibility: (.+?)\s*$`)

// All returns outbox's migrations in version order.
func All() []Migration {
	byVersion := map[int]*Migration{}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			panic("migrations: unexpected file " + e.Name())
		}
		version, _ := strconv.Atoi(m[1])
		body, err := files.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		mig := byVersion[version]
		if mig == nil {
			mig = &Migration{Name: m[2], Version: version}
			byVersion[version] = mig
		}
		if m[3] == "up" {
			mig.up = string(body)
			mig.NoTransaction = strings.HasPrefix(mig.up, noTransactionMarker)
			if c := compatibilityRE.FindStringSubmatch(mig.up); c != nil {
				mig.Compatibility = c[1]
			}
		} else {
			mig.down = string(body)
		}
	}
	all := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		all = append(all, *m)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Version < all[j].Version })
	return all
}

// Latest is the version of the newest migration.
func Latest() int {
	all := All()
	return all[len(all)-1].Version
}

// Migrator applies River's migrations and then outbox's in one schema.
type Migrator struct {
	pool   *pgxpool.Pool
	river  *rivermigrate.Migrator[pgx.Tx]
	schema string
}

// schemaRE is what a schema name must match. Names are kept simple because
// they are also part of notification channels and session settings.
var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// ValidSchema reports whether name may name outbox's schema: 1 to 40
// lowercase letters, digits and _, not starting with a digit. New refuses
// any other.
func ValidSchema(name string) bool { return schemaRE.MatchString(name) }

// Config configures a Migrator. A nil *Config means every default.
type Config struct {
	// Schema is the schema to migrate: River's tables and outbox's go in
	// it. It must satisfy ValidSchema. Defaults to SchemaDefault.
	Schema string
}

// withDefaults returns a copy of c (or of an empty Config when c is nil)
// with every unset field given its default.
func (c *Config) withDefaults() *Config {
	out := &Config{}
	if c != nil {
		*out = *c
	}
	if out.Schema == "" {
		out.Schema = SchemaDefault
	}
	return out
}

// validate reports a setting New refuses.
func (c *Config) validate() error {
	if !ValidSchema(c.Schema) {
		return fmt.Errorf("schema %q must match %s", c.Schema, schemaRE)
	}
	return nil
}

// New returns a Migrator for the schema config names. config may be nil.
// It returns an error for a schema name ValidSchema refuses.
func New(pool *pgxpool.Pool, config *Config) (*Migrator, error) {
	cfg := config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	river, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: cfg.Schema})
	if err != nil {
		return nil, fmt.Errorf("error creating River migrator: %w", err)
	}
	return &Migrator{pool: pool, river: river, schema: cfg.Schema}, nil
}

// Applied is one applied migration in a Result.
type Applied struct {
	// Component is "river" or "outbox".
	Component string
	Name      string
	Version   int
}

// Result lists the migrations an Up or Down applied or reverted.
type Result struct {
	Applied []Applied
}

// Status is the state of a schema's migrations.
type Status struct {
	// OutboxCurrent is the newest outbox migration applied (0 for none).
	OutboxCurrent int
	// OutboxLatest is the newest outbox migration this binary knows.
	OutboxLatest int
	// RiverCurrent is the newest River migration applied (0 for none).
	RiverCurrent int
	// RiverLatest is the newest River migration this binary knows.
	RiverLatest int
}

// UpToDate reports whether every known migration is applied.
func (s *Status) UpToDate() bool {
	return s.OutboxCurrent == s.OutboxLatest && s.RiverCurrent == s.RiverLatest
}

// withLock runs fn while holding a session-level advisory lock for the
// schema on a dedicated connection, and hands fn a transaction on that
// connection for outbox's own migrations. Replicas starting together queue on
// the lock; the second one then finds every migration applied and does
// nothing. River's migrations run in transactions of their own (one of them
// adds an enum value, which Postgres refuses to use in the transaction that
// added it), on other connections, still under the lock. If the process dies,
// its session ends and the lock is released.
//
// With createSchema, the schema is created on the lock's connection before
// the transaction begins, and so is committed before fn runs. A connection
// that looked the schema up while it was missing caches that answer, and a
// transaction begun before the schema existed keeps it: CREATE TABLE in the
// schema would then fail with "schema does not exist".
func (m *Migrator) withLock(ctx context.Context, createSchema bool, fn func(s *session) error) error {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("error acquiring migration connection: %w", err)
	}
	defer conn.Release()

	// Migrations wait as long as they must, for the lock and for their
	// statements, whatever timeouts the pool's sessions begin with (those
	// internal/dbutil.SetSessionTimeouts sets, when a process migrates at
	// start): a replica queued behind another's migration, or an index
	// built on a large table, is not stuck. The connection gets its values
	// back before it returns to the pool (set after connecting, they are
	// not what RESET would restore).
	var statementTimeout, lockTimeout string
	if err := conn.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), set_config('statement_timeout', '0', false), set_config('lock_timeout', '0', false)").Scan(&statementTimeout, &lockTimeout, nil, nil); err != nil {
		return fmt.Errorf("error clearing timeouts for migrations: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $2, false)", statementTimeout, lockTimeout) //nolint:errcheck // a broken connection is discarded by the pool

	h := fnv.New64a()
	h.Write([]byte("outbox.migrate:" + m.schema))
	lockID := int64(h.Sum64())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return fmt.Errorf("error taking migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID) //nolint:errcheck // released with the session anyway

	if createSchema {
		// Under the lock, so two migrators never race to create it.
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{m.schema}.Sanitize()); err != nil {
			return fmt.Errorf("error creating schema: %w", err)
		}
	}

	s := &session{conn: conn.Conn()}
	if s.tx, err = conn.Begin(ctx); err != nil {
		return fmt.Errorf("error beginning migration transaction: %w", err)
	}
	// The transaction current when fn returns: outsideTx replaces it.
	defer func() { s.tx.Rollback(context.WithoutCancel(ctx)) }() //nolint:errcheck // no-op after commit
	if err := fn(s); err != nil {
		return err
	}
	if err := s.tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing migrations: %w", err)
	}
	return nil
}

// session is the migration lock's connection and the transaction open on
// it.
type session struct {
	conn *pgx.Conn
	tx   pgx.Tx
}

// outsideTx commits the session's transaction, runs fn on the connection
// outside any transaction, and begins a new one. What was committed before
// stays committed if fn fails, so each no-transaction migration must be
// safe to run again.
func (s *session) outsideTx(ctx context.Context, fn func(conn *pgx.Conn) error) error {
	if err := s.tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing migrations: %w", err)
	}
	if err := fn(s.conn); err != nil {
		// A transaction to roll back, as withLock expects.
		if tx, berr := s.conn.Begin(context.WithoutCancel(ctx)); berr == nil {
			s.tx = tx
		}
		return err
	}
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error beginning migration transaction: %w", err)
	}
	s.tx = tx
	return nil
}

// smallIntentTableRows is the most intents a table may hold for a
// no-transaction migration to run in the transaction instead.
const smallIntentTableRows = 10_000

// smallIntentTable reports whether the intent table holds fewer than
// smallIntentTableRows rows.
func (m *Migrator) smallIntentTable(ctx context.Context, tx pgx.Tx) (bool, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+pgx.Identifier{m.schema, "outbox_intent"}.Sanitize()+
		` LIMIT `+strconv.Itoa(smallIntentTableRows)+`) t`).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("error counting intents: %w", err)
	}
	return n < smallIntentTableRows, nil
}

// apply runs one migration's SQL (up or down) in the session and records
// it with record, in the session's transaction or, for a no-transaction
// migration, statement by statement outside one.
func (m *Migrator) apply(ctx context.Context, s *session, mig Migration, sql, record string) error {
	sql = intentdb.Render(sql, m.schema)
	if mig.NoTransaction {
		small, err := m.smallIntentTable(ctx, s.tx)
		if err != nil {
			return err
		}
		if small {
			// A build takes milliseconds on a table this small, so the
			// plain forms in the transaction lock nothing for long. And
			// CONCURRENTLY would wait for every transaction of the
			// database older than the build, which a program that
			// migrates a fresh schema while it holds one open (tests do)
			// would wait on forever.
			sql = strings.ReplaceAll(sql, " CONCURRENTLY", "")
			mig.NoTransaction = false
		}
	}
	if !mig.NoTransaction {
		if _, err := s.tx.Exec(ctx, sql); err != nil {
			return err
		}
		_, err := s.tx.Exec(ctx, record, mig.Version, mig.Name)
		return err
	}
	return s.outsideTx(ctx, func(conn *pgx.Conn) error {
		for _, st := range statements(sql) {
			if _, err := conn.Exec(ctx, st); err != nil {
				return err
			}
		}
		_, err := conn.Exec(ctx, record, mig.Version, mig.Name)
		return err
	})
}

// migrationTableSQL creates outbox's migration table, which Up and the SQL
// of PendingSQL both need.
func (m *Migrator) migrationTableSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + pgx.Identifier{m.schema}.Sanitize() + `.outbox_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
}

func (m *Migrator) ensureTable(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, m.migrationTableSQL())
	if err != nil {
		return fmt.Errorf("error creating migration table: %w", err)
	}
	return nil
}

func (m *Migrator) current(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{m.schema, "outbox_migration"}.Sanitize()).Scan(&exists); err != nil {
		return 0, fmt.Errorf("error reading migration state: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var version int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+pgx.Identifier{m.schema, "outbox_migration"}.Sanitize()).Scan(&version)
	if err != nil {
		return 0, fmt.Errorf("error reading migration state: %w", err)
	}
	return version, nil
}

// PendingSQL returns the SQL that Up would run, for teams that apply
// migrations with their own tool (Flyway, Atlas, goose): River's pending
// migrations, then outbox's, each in a transaction of its own with the row
// that records it, so that Status (and serve's start-up check) then sees the
// schema as current. It changes nothing. Run it as the schema's owner, with
// nothing else migrating it meanwhile.
func (m *Migrator) PendingSQL(ctx context.Context) (string, error) {
	schema := pgx.Identifier{m.schema}.Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, "-- outbox migrations for schema %s, generated by outboxd migrate print.\n", schema)
	fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", schema)

	riverRes, err := m.river.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{DryRun: true})
	if err != nil {
		return "", fmt.Errorf("error reading River's pending migrations: %w", err)
	}
	for _, v := range riverRes.Versions {
		// As River records them: without the line column before its
		// migration 005 adds it.
		record := fmt.Sprintf("INSERT INTO %s.river_migration (line, version) VALUES ('main', %d);", schema, v.Version)
		if v.Version < riverLineColumnVersion {
			record = fmt.Sprintf("INSERT INTO %s.river_migration (version) VALUES (%d);", schema, v.Version)
		}
		fmt.Fprintf(&b, "\n-- river %03d %s\nBEGIN;\n%s\n%s\nCOMMIT;\n", v.Version, v.Name, strings.TrimSpace(v.SQL), record)
	}

	current, err := m.current(ctx, m.pool)
	if err != nil {
		return "", err
	}
	for _, mig := range All() {
		if mig.Version <= current {
			continue
		}
		if mig.NoTransaction {
			// Statements PostgreSQL refuses in a transaction, the
			// multi-statement string of a simple query included: a tool
			// must send them one at a time.
			fmt.Fprintf(&b, "\n-- outbox %03d %s\n-- %s", mig.Version, mig.Name, NoTransactionNote)
			for _, st := range statements(intentdb.Render(mig.up, m.schema)) {
				fmt.Fprintf(&b, "%s\n", st)
			}
			fmt.Fprintf(&b, "%s;\nINSERT INTO %s.outbox_migration (version, name) VALUES (%d, '%s');\n",
				m.migrationTableSQL(), schema, mig.Version, mig.Name)
			continue
		}
		fmt.Fprintf(&b, "\n-- outbox %03d %s\nBEGIN;\n", mig.Version, mig.Name)
		fmt.Fprintf(&b, "%s;\n", m.migrationTableSQL())
		fmt.Fprintf(&b, "%s\nINSERT INTO %s.outbox_migration (version, name) VALUES (%d, '%s');\nCOMMIT;\n",
			strings.TrimSpace(intentdb.Render(mig.up, m.schema)), schema, mig.Version, mig.Name)
	}
	return b.String(), nil
}

// NoTransactionNote is the comment line PendingSQL prints at the head of a
// migration that must run outside a transaction, one statement at a time.
const NoTransactionNote = "outside a transaction: run each statement on its own (CREATE INDEX CONCURRENTLY)\n"

// riverLineColumnVersion is River's migration that adds river_migration's
// line column.
const riverLineColumnVersion = 5

// Up applies every pending migration: River's first, because outbox's
// dispatcher inserts into River's tables, then outbox's.
func (m *Migrator) Up(ctx context.Context) (*Result, error) {
	res := &Result{}
	// The schema must exist, and be committed, before River migrates into it
	// on its own connections and before outbox's transaction begins.
	err := m.withLock(ctx, true, func(s *session) error {
		tx := s.tx
		riverRes, err := m.river.Migrate(ctx, rivermigrate.DirectionUp, nil)
		if err != nil {
			return fmt.Errorf("error applying River migrations: %w", err)
		}
		for _, v := range riverRes.Versions {
			res.Applied = append(res.Applied, Applied{Component: "river", Name: v.Name, Version: v.Version})
		}
		if err := m.ensureTable(ctx, tx); err != nil {
			return err
		}
		current, err := m.current(ctx, tx)
		if err != nil {
			return err
		}
		for _, mig := range All() {
			if mig.Version <= current {
				continue
			}
			record := `INSERT INTO ` + pgx.Identifier{m.schema, "outbox_migration"}.Sanitize() + ` (version, name) VALUES ($1, $2)`
			if err := m.apply(ctx, s, mig, mig.up, record); err != nil {
				return fmt.Errorf("error applying migration %03d_%s: %w", mig.Version, mig.Name, err)
			}
			res.Applied = append(res.Applied, Applied{Component: "outbox", Name: mig.Name, Version: mig.Version})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// DownOpts are options for Down.
type DownOpts struct {
	// All reverts every outbox migration and then every River migration,
	// leaving an empty schema. Without it, Down reverts only the newest
	// outbox migration. Defaults to false.
	All bool
}

// Down reverts the newest outbox migration, or with opts.All everything.
func (m *Migrator) Down(ctx context.Context, opts *DownOpts) (*Result, error) {
	if opts == nil {
		opts = &DownOpts{}
	}
	res := &Result{}
	err := m.withLock(ctx, false, func(s *session) error {
		current, err := m.current(ctx, s.tx)
		if err != nil {
			return err
		}
		all := All()
		for i := len(all) - 1; i >= 0; i-- {
			mig := all[i]
			if mig.Version > current {
				continue
			}
			// $2 only so that apply's arguments fit.
			record := `DELETE FROM ` + pgx.Identifier{m.schema, "outbox_migration"}.Sanitize() + ` WHERE version = $1 AND name = $2`
			if err := m.apply(ctx, s, mig, mig.down, record); err != nil {
				return fmt.Errorf("error reverting migration %03d_%s: %w", mig.Version, mig.Name, err)
			}
			res.Applied = append(res.Applied, Applied{Component: "outbox", Name: mig.Name, Version: mig.Version})
			if !opts.All {
				return nil
			}
		}
		if !opts.All {
			return nil
		}
		tx := s.tx
		if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{m.schema, "outbox_migration"}.Sanitize()); err != nil {
			return fmt.Errorf("error dropping migration table: %w", err)
		}
		// In the caller's transaction on purpose: outbox's tables and River's
		// go down together or not at all, under the migration lock (outbox's
		// migrations down to the last no-transaction one committed before). River
		// deprecates MigrateTx for the migrations that cannot run in one
		// transaction; none of River's down migrations here is one.
		riverRes, err := m.river.MigrateTx(ctx, tx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}) //nolint:staticcheck // see above
		if err != nil {
			return fmt.Errorf("error reverting River migrations: %w", err)
		}
		for _, v := range riverRes.Versions {
			res.Applied = append(res.Applied, Applied{Component: "river", Name: v.Name, Version: v.Version})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Status reports which migrations are applied.
func (m *Migrator) Status(ctx context.Context) (*Status, error) {
	st := &Status{OutboxLatest: Latest()}
	riverAll := m.river.AllVersions()
	st.RiverLatest = riverAll[len(riverAll)-1].Version

	current, err := m.current(ctx, m.pool)
	if err != nil {
		return nil, err
	}
	st.OutboxCurrent = current

	existing, err := m.river.ExistingVersions(ctx)
	if err != nil {
		var pgErr interface{ SQLState() string }
		// No river_migration table yet: nothing of River's is applied.
		if !errors.As(err, &pgErr) || pgErr.SQLState() != pgerrcode.UndefinedTable {
			return nil, fmt.Errorf("error reading River migration state: %w", err)
		}
	}
	for _, v := range existing {
		st.RiverCurrent = max(st.RiverCurrent, v.Version)
	}
	return st, nil
}

package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

var (
	cmdMigrate = &command{
		name: "migrate",
		args: "up|down|status|print|print-grants",
		doc: `Applies, reverts or inspects the migrations of OUTBOX_SCHEMA: River's, then
outbox's own, under an advisory lock so that replicas starting together apply
each one once.

Subcommands:
  up       apply every pending migration
  down     revert the newest outbox migration (--all: everything, River's too)
  status   print the applied and known versions, and "up to date" or
           "pending migrations" (exit code 0 either way)
  print    print the SQL of the pending migrations, for your own tool
  print-grants ROLE [NAMESPACE...]
           print the SQL that lets ROLE enqueue through the SQL functions`,
	}
	cmdMigratePrint = &command{
		name: "migrate print",
		doc: `Prints the SQL that migrate up would run: River's pending migrations, then
outbox's, each in a transaction with the row that records it, for teams that
apply migrations with Flyway, Atlas or goose. Applying it has the effect of
migrate up (without its advisory lock: apply it once). Changes nothing.`,
	}
	cmdMigratePrintGrants = &command{
		name: "migrate print-grants",
		args: "ROLE [NAMESPACE...]",
		doc: `Prints the SQL that lets ROLE enqueue through outbox's SQL functions (enqueue,
outbox_enqueue_many) in the given namespaces, or in every namespace without
any: USAGE on the schema, EXECUTE on the functions, and its rows in
outbox_namespace_grant. The functions run as their owner, so ROLE gets no
right on the intent table itself: it can neither read intents nor write them.
Run the output as the schema's owner. It connects to no database.`,
	}
	cmdMigrateUp = &command{
		name: "migrate up",
		doc:  "Applies every pending migration, River's first, and prints each one applied.",
	}
	cmdMigrateDown = &command{
		name: "migrate down",
		args: "[--all --yes]",
		doc: `Reverts the newest outbox migration, or with --all every outbox migration and
then every River migration, dropping their tables and the intents in them.
--all destroys every intent and job of the schema, so it also asks for --yes.
Prints each one reverted.`,
	}
	cmdMigrateStatus = &command{
		name: "migrate status",
		args: "[--json]",
		doc: `Prints River's and outbox's applied (current) and known (latest) migration
versions, then "up to date" or "pending migrations"; with --json, an object
with those four versions and up_to_date. The exit code is 0 either way; 1 only
when the state cannot be read.`,
	}
)

func (a *app) migrate(ctx context.Context, args []string) error {
	return a.subcommand(ctx, cmdMigrate, args, map[string]func(context.Context, []string) error{
		"down":         a.migrateDown,
		"print":        a.migratePrint,
		"print-grants": a.migratePrintGrants,
		"status":       a.migrateStatus,
		"up":           a.migrateUp,
	})
}

// migrator reads the configuration and returns a migrator for its schema,
// and a function to release it.
func (a *app) migrator(ctx context.Context) (*migrations.Migrator, func(), error) {
	cfg, err := a.config(ctx)
	if err != nil {
		return nil, nil, err
	}
	// No session timeouts: River's migrations run on the pool's other
	// connections, and an index built on a large table may take minutes
	// (the Migrator lifts them on its own session in serve too).
	noTimeouts := *cfg
	noTimeouts.StatementTimeout, noTimeouts.LockTimeout = 0, 0
	// The migrations' lock is a session's: behind a transaction pooler
	// they run on the session connection string (connectSession).
	pool, err := connectSession(ctx, &noTimeouts, 0)
	if err == nil && pool == nil {
		pool, err = connect(ctx, &noTimeouts, 0)
	}
	if err != nil {
		return nil, nil, err
	}
	// Its lock must be a session's, whichever string gave the pool.
	checked, sessionPool := pool, (*pgxpool.Pool)(nil)
	if cfg.SessionDatabaseURL != "" {
		checked, sessionPool = nil, pool
	}
	if err := checkSessions(ctx, checked, sessionPool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	migrator, err := migrations.New(pool, &migrations.Config{Schema: cfg.Schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return migrator, pool.Close, nil
}

func (a *app) migrateUp(ctx context.Context, args []string) error {
	if _, err := a.parse(cmdMigrateUp, newFlagSet(cmdMigrateUp), args, 0, 0); err != nil {
		return err
	}
	migrator, done, err := a.migrator(ctx)
	if err != nil {
		return err
	}
	defer done()
	res, err := migrator.Up(ctx)
	if err != nil {
		return err
	}
	a.printApplied(res, "applied", "already up to date")
	return nil
}

func (a *app) migrateDown(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdMigrateDown)
	all := fs.Bool("all", false, "revert every migration, River's too, leaving the schema empty")
	yes := fs.Bool("yes", false, "confirm --all")
	if _, err := a.parse(cmdMigrateDown, fs, args, 0, 0); err != nil {
		return err
	}
	if *all && !*yes {
		return &usageError{cmd: cmdMigrateDown.name, msg: "--all drops every intent and job of the schema: add --yes to confirm"}
	}
	migrator, done, err := a.migrator(ctx)
	if err != nil {
		return err
	}
	defer done()
	res, err := migrator.Down(ctx, &migrations.DownOpts{All: *all})
	if err != nil {
		return err
	}
	a.printApplied(res, "reverted", "nothing to revert")
	return nil
}

// printApplied prints one line per migration of res, or none when there is
// none.
func (a *app) printApplied(res *migrations.Result, verb, none string) {
	if len(res.Applied) == 0 {
		fmt.Fprintln(a.stdout, none)
		return
	}
	for _, m := range res.Applied {
		fmt.Fprintf(a.stdout, "%s %s %03d %s\n", verb, m.Component, m.Version, m.Name)
	}
}

func (a *app) migrateStatus(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdMigrateStatus)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if _, err := a.parse(cmdMigrateStatus, fs, args, 0, 0); err != nil {
		return err
	}
	migrator, done, err := a.migrator(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := migrator.Status(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(a.stdout, map[string]any{
			"river_current": st.RiverCurrent, "river_latest": st.RiverLatest,
			"outbox_current": st.OutboxCurrent, "outbox_latest": st.OutboxLatest,
			"up_to_date": st.UpToDate(),
		})
	}
	fmt.Fprintf(a.stdout, "river   current %03d latest %03d\n", st.RiverCurrent, st.RiverLatest)
	fmt.Fprintf(a.stdout, "outbox  current %03d latest %03d\n", st.OutboxCurrent, st.OutboxLatest)
	if st.UpToDate() {
		fmt.Fprintln(a.stdout, "up to date")
	} else {
		fmt.Fprintln(a.stdout, "pending migrations")
	}
	return nil
}

func (a *app) migratePrint(ctx context.Context, args []string) error {
	if _, err := a.parse(cmdMigratePrint, newFlagSet(cmdMigratePrint), args, 0, 0); err != nil {
		return err
	}
	migrator, done, err := a.migrator(ctx)
	if err != nil {
		return err
	}
	defer done()
	sql, err := migrator.PendingSQL(ctx)
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(a.stdout, sql)
	return err
}

func (a *app) migratePrintGrants(ctx context.Context, args []string) error {
	positional, err := a.parse(cmdMigratePrintGrants, newFlagSet(cmdMigratePrintGrants), args, 1, -1)
	if err != nil {
		return err
	}
	cfg, err := a.config(ctx)
	if err != nil {
		return err
	}
	role, namespaces := positional[0], positional[1:]
	if role == "" || len(role) > 63 {
		return &usageError{cmd: cmdMigratePrintGrants.name, msg: "ROLE must be a role name of 1 to 63 bytes"}
	}
	for _, ns := range namespaces {
		if err := outbox.ValidateNamespace(ns); err != nil {
			return &usageError{cmd: cmdMigratePrintGrants.name, msg: fmt.Sprintf("namespace %q: %s", ns, err)}
		}
	}
	_, err = fmt.Fprint(a.stdout, migrations.GrantsSQL(cfg.Schema, role, namespaces))
	return err
}

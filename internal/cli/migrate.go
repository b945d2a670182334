package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/outbox-dev/outbox/migrations"
)

var (
	cmdMigrate = &command{
		name: "migrate",
		args: "up|down|status",
		doc: `Applies, reverts or inspects the migrations of OUTBOX_SCHEMA: River's, then
outbox's own, under an advisory lock so that replicas starting together apply
each one once.

Subcommands:
  up       apply every pending migration
  down     revert the newest outbox migration (--all: everything, River's too)
  status   print the applied and known versions, and "up to date" or
           "pending migrations" (exit code 0 either way)`,
	}
	cmdMigrateUp = &command{
		name: "migrate up",
		doc:  "Applies every pending migration, River's first, and prints each one applied.",
	}
	cmdMigrateDown = &command{
		name: "migrate down",
		args: "[--all]",
		doc: `Reverts the newest outbox migration, or with --all every outbox migration and
then every River migration, dropping their tables and the intents in them.
Prints each one reverted.`,
	}
	cmdMigrateStatus = &command{
		name: "migrate status",
		doc: `Prints River's and outbox's applied (current) and known (latest) migration
versions, then "up to date" or "pending migrations". The exit code is 0 either
way; 1 only when the state cannot be read.`,
	}
)

func (a *app) migrate(ctx context.Context, args []string) error {
	return a.subcommand(ctx, cmdMigrate, args, map[string]func(context.Context, []string) error{
		"down":   a.migrateDown,
		"status": a.migrateStatus,
		"up":     a.migrateUp,
	})
}

// migrator parses cmd's command line, reads the configuration and returns a
// migrator for its schema, and a function to release it.
func (a *app) migrator(ctx context.Context, cmd *command, fs *flag.FlagSet, args []string) (*migrations.Migrator, func(), error) {
	if _, err := a.parse(cmd, fs, args, 0, 0); err != nil {
		return nil, nil, err
	}
	cfg, err := a.config(ctx)
	if err != nil {
		return nil, nil, err
	}
	pool, err := connect(ctx, cfg, 0)
	if err != nil {
		return nil, nil, err
	}
	migrator, err := migrations.New(pool, cfg.Schema)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return migrator, pool.Close, nil
}

func (a *app) migrateUp(ctx context.Context, args []string) error {
	migrator, done, err := a.migrator(ctx, cmdMigrateUp, newFlagSet(cmdMigrateUp), args)
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
	migrator, done, err := a.migrator(ctx, cmdMigrateDown, fs, args)
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
	migrator, done, err := a.migrator(ctx, cmdMigrateStatus, newFlagSet(cmdMigrateStatus), args)
	if err != nil {
		return err
	}
	defer done()
	st, err := migrator.Status(ctx)
	if err != nil {
		return err
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

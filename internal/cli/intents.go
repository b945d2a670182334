package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
)

var (
	cmdIntents = &command{
		name: "intents",
		args: "list|show|cancel|resolve|approve|deny",
		doc: `Reads and moves on the intents of OUTBOX_NAMESPACE.

Subcommands:
  list      list intents, newest first
  show      print one intent, optionally waiting until it is terminal
  cancel    cancel a pending intent
  resolve   decide the outcome of an unknown intent
  approve   release an intent awaiting approval
  deny      refuse an intent awaiting approval`,
	}
	cmdIntentsList = &command{
		name: "intents list",
		args: "[--state S[,S...]] [--effect E] [--limit N] [--cursor C] [--namespace NS] [--json]",
		doc: `Lists intents, newest first, as a table (key, state, effect, attempts,
created_at) or with --json as {"intents": [...], "next_cursor": ...}, where
next_cursor is null on the last page. The table lists one namespace
(--namespace, else OUTBOX_NAMESPACE): a note on stderr above it names that
namespace, and the others the API tokens name. When there are more, the
table is followed by a note on stderr giving the --cursor of the next page.`,
	}
	cmdIntentsShow = &command{
		name: "intents show",
		args: "KEY [--wait DURATION] [--namespace NS] [--json]",
		doc: `Prints the intent as JSON (--json is accepted for symmetry with list). With --wait, first waits until it is terminal
(succeeded, failed, unknown or cancelled) or the duration ends, and prints it
either way; the exit code is then 1 if it is still not terminal.`,
	}
	cmdIntentsCancel = &command{
		name: "intents cancel",
		args: "KEY [--note TEXT] [--namespace NS]",
		doc: `Cancels a pending intent and prints it as JSON. Fails with not_cancellable
once it has left pending, or when an earlier attempt may have reached the
provider. The intent records who cancelled (resolved_by: cli: and your user
name) and the note.`,
	}
	cmdIntentsResolve = &command{
		name: "intents resolve",
		args: "KEY --outcome succeeded|failed|retry [--note TEXT] [--namespace NS]",
		doc: `Moves an unknown intent on, as an operator's decision: succeeded (the effect
did happen), failed (it did not, and must not be sent again) or retry (send it
again, knowingly). Prints the intent as JSON. Fails with not_unknown for an
intent in another state. The command line acts as an operator; the intent
records who resolved it (resolved_by: cli: and your user name) and the note.`,
	}
	cmdIntentsApprove = &command{
		name: "intents approve",
		args: "KEY --args-sha256 HEX [--note TEXT] [--namespace NS]",
		doc: `Approves an intent awaiting approval: it becomes pending and runs. --args-sha256
must be the intent's args_sha256 as you reviewed it (intents show KEY prints
it); it is refused with approval_mismatch otherwise, so an approval releases
only the arguments that were shown. Fails with not_awaiting_approval for an
intent in another state. The intent records who approved (approved_by: cli:
and your user name) and the note.`,
	}
	cmdIntentsDeny = &command{
		name: "intents deny",
		args: "KEY --args-sha256 HEX [--note TEXT] [--namespace NS]",
		doc: `Denies an intent awaiting approval: it ends cancelled with error
approval_denied, the note as its message. --args-sha256 and the refusals are
those of approve. The intent records who denied it (denied_by).`,
	}
)

func (a *app) intents(ctx context.Context, args []string) error {
	return a.subcommand(ctx, cmdIntents, args, map[string]func(context.Context, []string) error{
		"approve": func(ctx context.Context, args []string) error { return a.intentsDecide(ctx, cmdIntentsApprove, args) },
		"cancel":  a.intentsCancel,
		"deny":    func(ctx context.Context, args []string) error { return a.intentsDecide(ctx, cmdIntentsDeny, args) },
		"list":    a.intentsList,
		"resolve": a.intentsResolve,
		"show":    a.intentsShow,
	})
}

// intentList is a listing as JSON.
type intentList struct {
	Intents    []*outbox.Intent `json:"intents"`
	NextCursor *string          `json:"next_cursor"`
}

func (a *app) intentsList(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdIntentsList)
	states := fs.String("state", "", "keep only intents in these `STATES`, comma-separated (pending, running, succeeded, failed, unknown, cancelled)")
	effect := fs.String("effect", "", "keep only intents of this `EFFECT`")
	limit := fs.Int("limit", outbox.ListLimitDefault, "page size `N`, at most "+strconv.Itoa(outbox.ListLimitMax))
	cursor := fs.String("cursor", "", "continue a previous listing from its next `CURSOR`")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	namespace := namespaceFlag(fs)
	if _, err := a.parse(cmdIntentsList, fs, args, 0, 0); err != nil {
		return err
	}
	// Zero is not "the default" here: the HTTP API refuses limit=0 too.
	if *limit < 1 || *limit > outbox.ListLimitMax {
		return &usageError{cmd: cmdIntentsList.name, msg: "--limit must be between 1 and " + strconv.Itoa(outbox.ListLimitMax)}
	}
	params := &outbox.ListParams{Cursor: *cursor, Effect: *effect, Limit: *limit}
	if *states != "" {
		for _, s := range strings.Split(*states, ",") {
			params.States = append(params.States, outbox.State(strings.TrimSpace(s)))
		}
	}

	client, pool, cfg, err := a.newClient(ctx, namespace)
	if err != nil {
		return err
	}
	defer pool.Close()
	params.Namespace = cfg.Namespace
	res, err := client.List(ctx, params)
	if err != nil {
		return unmigrated(cfg, err)
	}

	if *asJSON {
		out := intentList{Intents: res.Intents}
		if res.NextCursor != "" {
			out.NextCursor = &res.NextCursor
		}
		return writeJSON(a.stdout, out)
	}
	// Which namespace this is, before the table: an empty table of
	// namespace default is otherwise easy to take for no intents at all
	// when the tokens name another. On stderr, as the cursor's note, so
	// that stdout stays the table.
	fmt.Fprintln(a.stderr, listedNamespaceNote(cfg))
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tEFFECT\tATTEMPTS\tCREATED_AT")
	for _, i := range res.Intents {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", i.Key, i.State, i.Effect, i.Attempts, i.CreatedAt.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.NextCursor != "" {
		fmt.Fprintf(a.stderr, "more intents: add --cursor %s\n", res.NextCursor)
	}
	return nil
}

// listedNamespaceNote says which namespace intents list read, how to choose
// another, and which others the API tokens name.
func listedNamespaceNote(cfg *Config) string {
	note := "namespace " + cfg.Namespace + " (another: --namespace NS or OUTBOX_NAMESPACE"
	var others []string
	for _, t := range cfg.Tokens() {
		if t.Namespace != cfg.Namespace && !slices.Contains(others, t.Namespace) {
			others = append(others, t.Namespace)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		note += "; the API tokens also name " + strings.Join(others, ", ")
	}
	return note + ")"
}

// waitRereadTimeout bounds show --wait's last read after its wait ended.
const waitRereadTimeout = 10 * time.Second

func (a *app) intentsShow(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdIntentsShow)
	wait := fs.Duration("wait", 0, "wait up to `DURATION` (such as 30s) for the intent to be terminal")
	fs.Bool("json", true, "print JSON (always)")
	namespace := namespaceFlag(fs)
	positional, err := a.parse(cmdIntentsShow, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *wait < 0 {
		return &usageError{cmd: cmdIntentsShow.name, msg: "--wait must not be negative"}
	}
	key := positional[0]

	client, pool, cfg, err := a.newClient(ctx, namespace)
	if err != nil {
		return err
	}
	defer pool.Close()
	if *wait == 0 {
		intent, err := client.Get(ctx, cfg.Namespace, key)
		if err != nil {
			return unmigrated(cfg, err)
		}
		return a.writeShown(ctx, pool, cfg, intent)
	}

	waitCtx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	intent, err := client.Wait(waitCtx, cfg.Namespace, key)
	if err != nil {
		if waitCtx.Err() == nil || ctx.Err() != nil {
			return unmigrated(cfg, err)
		}
		// The wait ran out, possibly in the middle of a read: read the
		// intent once more, to print how it stands now.
		readCtx, cancel := context.WithTimeout(ctx, waitRereadTimeout)
		defer cancel()
		if intent, err = client.Get(readCtx, cfg.Namespace, key); err != nil {
			return err
		}
	}
	if err := a.writeShown(ctx, pool, cfg, intent); err != nil {
		return err
	}
	if !intent.State.Terminal() {
		fmt.Fprintf(a.stderr, "outboxd: intent %s is still %s after %s\n", key, intent.State, *wait)
		return &exitError{code: ExitFailure}
	}
	return nil
}

// shownIntent is what intents show prints: the intent, and what its last
// attempt that recorded them sent the provider (an MCP upstream's call,
// with its marker and key_arg applied), for an operator who resolves an
// unknown intent.
type shownIntent struct {
	*outbox.Intent
	SentArgs *intentdb.SentArgs `json:"sent_args,omitempty"`
}

// writeShown prints intent as intents show does.
func (a *app) writeShown(ctx context.Context, pool *pgxpool.Pool, cfg *Config, intent *outbox.Intent) error {
	sent, err := intentdb.New(cfg.Schema).SentArgsOf(ctx, pool, intent.ID)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedColumn {
		// A schema not yet migrated to 019 records no sent arguments.
		sent, err = nil, nil
	}
	if err != nil {
		return unmigrated(cfg, fmt.Errorf("error reading intent %s's sent arguments: %w", intent.Key, err))
	}
	if err := writeJSON(a.stdout, &shownIntent{Intent: intent, SentArgs: sent}); err != nil {
		return err
	}
	if cfg.PublicURL != "" {
		// Where an operator sees (and decides) it in a browser.
		fmt.Fprintf(a.stderr, "console: %s/console/intents/%s/%s\n", strings.TrimRight(cfg.PublicURL, "/"), url.PathEscape(intent.Namespace), url.PathEscape(intent.Key))
	}
	return nil
}

func (a *app) intentsCancel(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdIntentsCancel)
	note := fs.String("note", "", "records `TEXT` saying why")
	namespace := namespaceFlag(fs)
	positional, err := a.parse(cmdIntentsCancel, fs, args, 1, 1)
	if err != nil {
		return err
	}
	client, pool, cfg, err := a.newClient(ctx, namespace)
	if err != nil {
		return err
	}
	defer pool.Close()
	intent, err := client.Cancel(ctx, &outbox.CancelParams{By: access.CLIActor(), Key: positional[0], Namespace: cfg.Namespace, Note: *note})
	if errors.Is(err, outbox.ErrCancelRequested) {
		// Not refused: the provider was asked to stop. The intent as it
		// stands, and what happens next.
		if intent, err = client.Get(ctx, cfg.Namespace, positional[0]); err != nil {
			return err
		}
		if err := writeJSON(a.stdout, intent); err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "cancel of intent %s passed to its provider, which holds the work as a task: the intent ends by what the provider reports (see outboxd intents show %s)\n", intent.Key, intent.Key)
		return nil
	}
	if err != nil {
		return unmigrated(cfg, err)
	}
	if err := writeJSON(a.stdout, intent); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "cancelled intent %s\n", intent.Key)
	return nil
}

func (a *app) intentsResolve(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdIntentsResolve)
	outcome := fs.String("outcome", "", "the `OUTCOME`: succeeded, failed or retry (required)")
	note := fs.String("note", "", "records `TEXT` saying why")
	namespace := namespaceFlag(fs)
	positional, err := a.parse(cmdIntentsResolve, fs, args, 1, 1)
	if err != nil {
		return err
	}
	switch o := outbox.Outcome(*outcome); o {
	case outbox.OutcomeSucceeded, outbox.OutcomeFailed, outbox.OutcomeRetry:
	case "":
		return &usageError{cmd: cmdIntentsResolve.name, msg: "--outcome is required"}
	default:
		return &usageError{cmd: cmdIntentsResolve.name, msg: fmt.Sprintf("--outcome must be succeeded, failed or retry, not %q", o)}
	}
	client, pool, cfg, err := a.newClient(ctx, namespace)
	if err != nil {
		return err
	}
	defer pool.Close()
	intent, err := client.Resolve(ctx, &outbox.ResolveParams{
		By:        access.CLIActor(),
		Key:       positional[0],
		Namespace: cfg.Namespace,
		Note:      *note,
		Outcome:   outbox.Outcome(*outcome),
	})
	if err != nil {
		return unmigrated(cfg, err)
	}
	if err := writeJSON(a.stdout, intent); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "resolved intent %s: now %s\n", intent.Key, intent.State)
	return nil
}

// intentsDecide is intents approve and intents deny.
func (a *app) intentsDecide(ctx context.Context, cmd *command, args []string) error {
	fs := newFlagSet(cmd)
	sum := fs.String("args-sha256", "", "the intent's args_sha256 as reviewed, `HEX` (required)")
	note := fs.String("note", "", "records `TEXT` saying why")
	namespace := namespaceFlag(fs)
	positional, err := a.parse(cmd, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *sum == "" {
		return &usageError{cmd: cmd.name, msg: "--args-sha256 is required: the intent's args_sha256 (intents show KEY)"}
	}
	client, pool, cfg, err := a.newClient(ctx, namespace)
	if err != nil {
		return err
	}
	defer pool.Close()
	decide, verb := client.Approve, "approved"
	if cmd == cmdIntentsDeny {
		decide, verb = client.Deny, "denied"
	}
	intent, err := decide(ctx, &outbox.ApprovalParams{
		ArgsSHA256: *sum,
		By:         access.CLIActor(),
		Key:        positional[0],
		Namespace:  cfg.Namespace,
		Note:       *note,
	})
	if err != nil {
		return unmigrated(cfg, err)
	}
	if err := writeJSON(a.stdout, intent); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "%s intent %s: now %s\n", verb, intent.Key, intent.State)
	return nil
}

// namespaceFlag adds --namespace to fs: the namespace to act in, instead of
// OUTBOX_NAMESPACE.
func namespaceFlag(fs *flag.FlagSet) *string {
	return fs.String("namespace", "", "act in `NAMESPACE` (default: OUTBOX_NAMESPACE)")
}

// unmigrated turns the error of a statement on a schema without outbox's
// tables into the advice serve gives.
func unmigrated(cfg *Config, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UndefinedTable || pgErr.Code == pgerrcode.InvalidSchemaName || pgErr.Code == pgerrcode.UndefinedFunction) {
		return fmt.Errorf("schema %s has no outbox tables: run outboxd migrate up", cfg.Schema)
	}
	return err
}

// newClient reads the configuration and returns a client without effects,
// for the commands that only read and resolve intents, with its pool to
// close. A non-empty *namespace overrides OUTBOX_NAMESPACE.
func (a *app) newClient(ctx context.Context, namespace *string) (*outbox.Client, *pgxpool.Pool, *Config, error) {
	cfg, err := a.config(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if namespace != nil && *namespace != "" {
		if err := outbox.ValidateNamespace(*namespace); err != nil {
			return nil, nil, nil, &usageError{msg: "--namespace " + err.Error()}
		}
		cfg.Namespace = *namespace
	}
	pool, err := connect(ctx, cfg, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	client, err := outbox.NewClient(pool, &outbox.Config{Logger: newCommandLogger(cfg, a.stderr), Schema: cfg.Schema})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return client, pool, cfg, nil
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/sethvargo/go-envconfig"

	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/outbox"
)

// Exit codes. Scripts can tell a refusal by the contract (the same key for
// another action, a cancel too late, a resolve of an intent that is not
// unknown) from a failure to do the work at all.
const (
	// ExitOK is success.
	ExitOK = 0
	// ExitFailure is an error: the database is down, a bad configuration,
	// a wait that ran out.
	ExitFailure = 1
	// ExitUsage is a mistake in the command line.
	ExitUsage = 2
	// ExitRefused is a refusal by the contract: idempotency_key_reused,
	// not_cancellable, not_unknown, not_awaiting_approval or
	// approval_mismatch.
	ExitRefused = 3
)

// Main runs outboxd with args (the arguments after the program's name),
// reading the configuration from the process environment and input from
// os.Stdin, and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Run(ctx, args, &RunOpts{Stderr: stderr, Stdout: stdout})
}

// RunOpts are the optional settings of Run.
type RunOpts struct {
	// Lookuper reads the environment variables. Defaults to the process
	// environment.
	Lookuper envconfig.Lookuper

	// Stderr receives logs and error messages. Defaults to os.Stderr.
	Stderr io.Writer

	// Stdin is read by enqueue --args -. Defaults to os.Stdin.
	Stdin io.Reader

	// Stdout receives the commands' output. Defaults to os.Stdout.
	Stdout io.Writer
}

// Run is Main with the environment and the standard streams given, for
// tests. Cancelling ctx stops serve as SIGTERM does.
func Run(ctx context.Context, args []string, opts *RunOpts) int {
	a := &app{lookuper: envconfig.OsLookuper(), stderr: os.Stderr, stdin: os.Stdin, stdout: os.Stdout}
	if opts != nil {
		if opts.Lookuper != nil {
			a.lookuper = opts.Lookuper
		}
		if opts.Stderr != nil {
			a.stderr = opts.Stderr
		}
		if opts.Stdin != nil {
			a.stdin = opts.Stdin
		}
		if opts.Stdout != nil {
			a.stdout = opts.Stdout
		}
	}
	return a.exitCode(a.run(ctx, args))
}

// app is one run of outboxd: where it reads and writes.
type app struct {
	lookuper envconfig.Lookuper
	stderr   io.Writer
	stdin    io.Reader
	stdout   io.Writer
}

// commands are outboxd's commands, in the order the help lists them.
var commands = []struct {
	name, summary string
	run           func(a *app, ctx context.Context, args []string) error
}{
	{"serve", "run the dispatcher and the HTTP server", (*app).serve},
	{"migrate", "apply, revert or inspect the database migrations", (*app).migrate},
	{"recover", "after restoring a backup: mark the intents not ended as possibly sent", (*app).recover},
	{"enqueue", "record an intent", (*app).enqueue},
	{"intents", "list, show, cancel or resolve intents", (*app).intents},
	{"mcp", "serve MCP (the agents' tools) on stdio", (*app).mcp},
	{"effects", "check a file of declared HTTP effects, or list the effects enabled", (*app).effects},
	{"demo", "tell the story outbox exists for, with real calls, then serve", (*app).demo},
	{"bench", "measure outbox against plain River on DATABASE_URL", (*app).bench},
	{"version", "print the version", (*app).version},
}

const usageMain = `outboxd records side effects as intents in Postgres and carries each one out
once, with River.

Usage:
  outboxd <command> [arguments]

Commands:
%s
Run 'outboxd <command> --help' for a command's usage.

Environment (variable, default, meaning):
%s
Traces follow OpenTelemetry's own variables, off by default:
OTEL_TRACES_EXPORTER=otlp with OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_SDK_DISABLED (docs/operations.md, "Traces").

Exit codes: 0 success, 1 failure (database down, bad configuration), 2 usage
error, 3 refused by the contract (idempotency_key_reused, not_cancellable,
not_unknown).
`

func writeMainUsage(w io.Writer) {
	var cmds, env strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&cmds, "  %-9s %s\n", c.name, c.summary)
	}
	writeEnvHelp(&env)
	fmt.Fprintf(w, usageMain, cmds.String(), env.String())
}

func (a *app) run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		// A bare outboxd is a question: answer with the usage, but as a
		// usage error, so a script that forgot its command fails.
		writeMainUsage(a.stderr)
		return &exitError{code: ExitUsage}
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-version", "--version":
		return a.version(ctx, rest)
	case "-h", "-help", "--help", "help":
		if name == "help" && len(rest) > 0 {
			// outboxd help <command> is outboxd <command> --help.
			return a.run(ctx, []string{rest[0], "--help"})
		}
		writeMainUsage(a.stdout)
		return nil
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(a, ctx, rest)
		}
	}
	return &usageError{msg: fmt.Sprintf("unknown command %q", name)}
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct {
	// cmd is the command whose help to suggest ("intents list"), empty for
	// outboxd itself.
	cmd string
	msg string
}

func (e *usageError) Error() string { return e.msg }

// exitError ends a run with code, its message already written (or none
// needed).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// exitCode reports err, if any, on stderr and returns the exit code.
func (a *app) exitCode(err error) int {
	var (
		usageErr *usageError
		exitErr  *exitError
	)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &usageErr):
		cmd := "outboxd"
		if usageErr.cmd != "" {
			cmd += " " + usageErr.cmd
		}
		fmt.Fprintf(a.stderr, "%s: %s\nRun '%s --help' for usage.\n", cmd, usageErr.msg, cmd)
		return ExitUsage
	case errors.As(err, &exitErr):
		return exitErr.code
	case refused(err):
		fmt.Fprintf(a.stderr, "outboxd: %s\n", errorLine(err))
		return ExitRefused
	default:
		for _, line := range errorLines(err) {
			fmt.Fprintf(a.stderr, "outboxd: %s\n", line)
		}
		return ExitFailure
	}
}

// errorLines is err as lines: an effects file's problems one a line (each
// names its file, line, effect and field), any other error as one.
func errorLines(err error) []string {
	var fileErrs declared.FileErrors
	if !errors.As(err, &fileErrs) {
		return []string{errorLine(err)}
	}
	lines := make([]string, len(fileErrs))
	for i, fe := range fileErrs {
		lines[i] = errorLine(fe)
	}
	return lines
}

// refused reports whether err is a refusal by the contract (ExitRefused).
func refused(err error) bool {
	switch outbox.ErrorCode(err) {
	case outbox.CodeIdempotencyKeyReused, outbox.CodeNotCancellable, outbox.CodeNotUnknown,
		outbox.CodeApprovalMismatch, outbox.CodeNotAwaitingApproval:
		return true
	}
	return false
}

// errorLine is err as one line. An outbox error is reported as itself,
// without the context it was wrapped in, so that the line starts with its
// code: "not_found: no intent with this key".
func errorLine(err error) string {
	var (
		keyReused *outbox.KeyReusedError
		outboxErr *outbox.Error
	)
	switch {
	case errors.As(err, &keyReused):
		err = keyReused
	case errors.As(err, &outboxErr):
		err = outboxErr
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// config reads the configuration from the environment.
func (a *app) config(ctx context.Context) (*Config, error) {
	return loadConfig(ctx, a.lookuper)
}

// command describes one command's command line for parseFlags and its help.
type command struct {
	// name is the command after "outboxd": "intents show".
	name string
	// args is the synopsis after the name: "KEY [--wait DURATION]".
	args string
	// doc explains the command, in a few lines.
	doc string
}

// newFlagSet returns a flag set for cmd that reports nothing itself: parse
// does.
func newFlagSet(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args for cmd and returns its positional arguments, checking
// there are between minArgs and maxArgs of them (maxArgs -1: any number).
// Unlike flag.Parse, flags may follow positional arguments
// ("intents show KEY --wait 10s"); after "--" everything is positional. On
// -h or --help it prints the usage on stdout and returns flag.ErrHelp.
func (a *app) parse(cmd *command, fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				writeUsage(a.stdout, cmd, fs)
				return nil, flag.ErrHelp
			}
			return nil, &usageError{cmd: cmd.name, msg: flagError(err, args)}
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	switch {
	case len(positional) < minArgs:
		return nil, &usageError{cmd: cmd.name, msg: "missing arguments: expected " + cmd.args}
	case maxArgs >= 0 && len(positional) > maxArgs:
		return nil, &usageError{cmd: cmd.name, msg: fmt.Sprintf("unexpected argument %q", positional[maxArgs])}
	}
	return positional, nil
}

// flagNameRE finds a flag's name in the flag package's messages, which
// write it with one dash ("flag provided but not defined: -namespace").
var flagNameRE = regexp.MustCompile(`(^|\s)-([a-zA-Z][a-zA-Z0-9-]*)`)

// flagError is a flag package error with each flag written as it was typed
// in args: with two dashes, as the help writes them, unless it was typed
// with one.
func flagError(err error, args []string) string {
	return flagNameRE.ReplaceAllStringFunc(err.Error(), func(m string) string {
		lead, name, _ := strings.Cut(m, "-")
		for _, arg := range args {
			if arg == "-"+name || strings.HasPrefix(arg, "-"+name+"=") {
				return m
			}
		}
		return lead + "--" + name
	})
}

// writeUsage prints cmd's help: synopsis, explanation and flags.
func writeUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	synopsis := strings.TrimSpace("outboxd " + cmd.name + " " + cmd.args)
	fmt.Fprintf(w, "Usage:\n  %s\n\n%s\n", synopsis, strings.TrimSpace(cmd.doc))
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprintf(w, "\nFlags:\n")
			first = false
		}
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintf(w, "%s\n      %s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprintf(w, "\nRun 'outboxd --help' for the environment variables.\n")
}

// subcommand runs the subcommand of a command group named by args[0]: the
// "up" of "migrate up".
func (a *app) subcommand(ctx context.Context, group *command, args []string, subs map[string]func(ctx context.Context, args []string) error) error {
	if len(args) == 0 {
		return &usageError{cmd: group.name, msg: "missing subcommand: expected " + group.args}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		writeUsage(a.stdout, group, newFlagSet(group))
		return flag.ErrHelp
	}
	run, ok := subs[args[0]]
	if !ok {
		return &usageError{cmd: group.name, msg: fmt.Sprintf("unknown subcommand %q", args[0])}
	}
	return run(ctx, args[1:])
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

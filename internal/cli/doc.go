// Package cli is outboxd's command line: serve, migrate, enqueue, intents,
// mcp, demo, bench and version. cmd/outboxd only hands it the arguments and the
// standard streams; tests run it in process with Run, an environment of their
// own and buffers.
//
// The configuration comes from the environment (see Config), read at the
// start of every command that needs it: a bad value stops the command with
// one line naming the variable. Exit codes are ExitOK (0), ExitFailure (1:
// the database is down, a bad configuration), ExitUsage (2: a mistake in the
// command line, or no command at all, which prints the usage) and
// ExitRefused (3: the contract refused, with idempotency_key_reused,
// not_cancellable, not_unknown, not_awaiting_approval or approval_mismatch).
// --help prints a command's usage on stdout and exits 0. Every read command
// takes --namespace and --json.
package cli

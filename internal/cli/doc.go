// Package cli is outboxd's command line: serve, migrate, enqueue, intents
// and version. cmd/outboxd only hands it the arguments and the standard
// streams; tests run it in process with Run, an environment of their own and
// buffers.
//
// The configuration comes from the environment (see Config), read at the
// start of every command that needs it: a bad value stops the command with
// one line naming the variable. Exit codes are 0 for success, 1 for a
// failure and 2 for a usage error; --help prints a command's usage on stdout
// and exits 0.
package cli

// Package pgcluster starts throwaway PostgreSQL clusters for tests.
//
// A cluster lives in a fresh temporary directory: its data directory, server
// log, and Unix socket are all inside it. It listens on that socket only, with
// no TCP listener at all: it runs with trust authentication and a superuser,
// and the directory's 0700 mode is what keeps other local users out (over
// TCP, any of them could connect and run COPY ... TO PROGRAM as the user who
// started it). A directory of its own also means it never collides with a
// system cluster or with other throwaway clusters. It's tuned for speed
// rather than durability (fsync is off) and is deleted entirely by Stop.
//
// PostgreSQL refuses to run as root, so when the current process is root the
// server binaries are run as the unprivileged "postgres" user instead.
//
// The server runs detached from the calling process (pg_ctl puts it in its own
// session), so it can't simply die with its parent. Stop is the normal way of
// shutting it down, but as a safety net every cluster also has a small
// watchdog process that stops the server and removes its directory when the
// process that started it exits without calling Stop (a crash, a test binary
// killed by a timeout, Ctrl-C). Only something that also kills the watchdog,
// like SIGKILL sent to every process at once, can leave a cluster behind.
package pgcluster

package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/dbutil"
)

// connect opens a pool on cfg's database and checks that it answers.
// maxConns of 0 keeps pgxpool's default. Tracers, when given, trace every
// statement (serve's outbox_database_errors_total and OUTBOX_TRACE_SQL).
func connect(ctx context.Context, cfg *Config, maxConns int32, tracer ...pgx.QueryTracer) (*pgxpool.Pool, error) {
	if err := cfg.requireDatabaseURL(); err != nil {
		return nil, err
	}
	poolConfig := cfg.poolConfig.Copy()
	if maxConns > 0 {
		poolConfig.MaxConns = maxConns
	}
	if cfg.PollOnly {
		// A transaction pooler hands each transaction to whichever server
		// connection is free: a statement prepared by name on one is
		// missing from, or already taken on, the next (PgBouncer before
		// 1.21). The unnamed statement of QueryExecModeExec lives within
		// one round trip. A mode named in the URL wins.
		if !strings.Contains(cfg.DatabaseURL, "default_query_exec_mode") {
			poolConfig.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		}
	} else {
		// Every statement outbox runs is bounded (docs/operations.md,
		// "Running out"); migrations lift the bounds for their own
		// session. Behind a transaction pooler the role's settings bound
		// them instead (checkRoleTimeouts).
		dbutil.SetSessionTimeouts(poolConfig, cfg.StatementTimeout, cfg.LockTimeout)
	}
	switch len(tracer) {
	case 0:
	case 1:
		poolConfig.ConnConfig.Tracer = tracer[0]
	default:
		// multitracer hands each tracer the calls of the interfaces it
		// implements (batches, the pool's acquires).
		poolConfig.ConnConfig.Tracer = multitracer.New(tracer...)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s: %w", redactDatabaseURL(cfg.DatabaseURL), err)
	}
	// The pool connects lazily; fail here, with one clear line, rather
	// than in the middle of the command.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("error connecting to %s: %w", redactDatabaseURL(cfg.DatabaseURL), err)
	}
	return pool, nil
}

// connectSession opens the pool of what needs a session of its own (the
// liveness lock, LISTEN, the migrations' lock): SessionDatabaseURL's, or
// nil when it is unset and cfg.PollOnly is not, for the caller to use its
// one pool. With PollOnly and no SessionDatabaseURL it refuses, in one line:
// on a transaction pooler's connection a session advisory lock outlives
// the process and a LISTEN hears nothing.
func connectSession(ctx context.Context, cfg *Config, maxConns int32) (*pgxpool.Pool, error) {
	if cfg.SessionDatabaseURL == "" {
		if cfg.PollOnly {
			return nil, &ConfigError{Var: envName("SessionDatabaseURL"), Message: "not set; OUTBOX_POLL_ONLY=true (a transaction pooler) cannot hold the process's liveness lock, LISTEN or the migrations' lock: expected " + fieldTag("SessionDatabaseURL", "expect")}
		}
		return nil, nil
	}
	session := *cfg
	session.DatabaseURL, session.poolConfig, session.PollOnly = cfg.SessionDatabaseURL, cfg.sessionPoolConfig, false
	return connect(ctx, &session, maxConns)
}

// checkSessions refuses, in one line, a pool meant to hold sessions whose
// connections are not: the session pool (SessionDatabaseURL) or, without
// one, the pool of DATABASE_URL, when it goes through a transaction pooler
// and PollOnly is not set. On such connections a session advisory lock
// (liveness, migrations) outlives its process on a server connection
// others use, and LISTEN hears nothing.
func checkSessions(ctx context.Context, pool, sessionPool *pgxpool.Pool) error {
	if sessionPool != nil {
		if err := dispatcher.CheckSession(ctx, sessionPool); errors.Is(err, dispatcher.ErrNotASession) {
			return &ConfigError{Var: envName("SessionDatabaseURL"), Message: "its connections are not sessions (they change backend between statements: a transaction pooler's?); expected " + fieldTag("SessionDatabaseURL", "expect")}
		} else if err != nil {
			return fmt.Errorf("error checking OUTBOX_SESSION_DATABASE_URL's sessions: %w", err)
		}
		return nil
	}
	if err := dispatcher.CheckSession(ctx, pool); errors.Is(err, dispatcher.ErrNotASession) {
		return &ConfigError{Var: envName("DatabaseURL"), Message: "its connections are not sessions (they change backend between statements): behind a transaction pooler set OUTBOX_POLL_ONLY=true and OUTBOX_SESSION_DATABASE_URL (docs/operations.md, \"Behind PgBouncer\")"}
	} else if err != nil {
		return fmt.Errorf("error checking DATABASE_URL's sessions: %w", err)
	}
	return nil
}

// checkRoleTimeouts warns, behind a transaction pooler (cfg.PollOnly), when
// the database's sessions do not start with the configured timeouts: they
// cannot be set per session there, and belong to the role.
func checkRoleTimeouts(ctx context.Context, cfg *Config, pool *pgxpool.Pool, logger *slog.Logger) {
	if !cfg.PollOnly {
		return
	}
	// pg_settings gives milliseconds, whatever unit the value was set in.
	var statementMS, lockMS int64
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'statement_timeout'),
		(SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'lock_timeout')`).Scan(&statementMS, &lockMS); err != nil {
		logger.WarnContext(ctx, "error reading the role's timeouts", slog.String("error", err.Error()))
		return
	}
	statement, lock := time.Duration(statementMS)*time.Millisecond, time.Duration(lockMS)*time.Millisecond
	// 0 configured leaves the server's setting, whatever it is.
	if (cfg.StatementTimeout > 0 && statement != cfg.StatementTimeout) || (cfg.LockTimeout > 0 && lock != cfg.LockTimeout) {
		logger.WarnContext(ctx, "behind a transaction pooler the timeouts are the role's: set them with ALTER ROLE ... SET (docs/operations.md, \"Behind PgBouncer\")",
			slog.String("statement_timeout", statement.String()), slog.String("lock_timeout", lock.String()),
			slog.String("want_statement_timeout", cfg.StatementTimeout.String()), slog.String("want_lock_timeout", cfg.LockTimeout.String()))
	}
}

// redacted replaces passwords in redactDatabaseURL's answers.
const redacted = "xxxxx"

// keywordPasswordRE finds the password and sslpassword settings of a
// keyword/value connection string, quoted or not, with the quotes escaped
// by a backslash or doubled inside.
var keywordPasswordRE = regexp.MustCompile(`(?i)\b((?:ssl)?password)\s*=\s*(?:'(?:[^'\\]|\\.|'')*'|[^\s]*)`)

// redactDatabaseURL returns the connection string with its passwords
// replaced, for logs and errors: the URL's user password and its password
// and sslpassword parameters, or a keyword/value string's password settings.
// A URL that does not parse is replaced entirely.
func redactDatabaseURL(s string) string {
	if !strings.HasPrefix(s, "postgres://") && !strings.HasPrefix(s, "postgresql://") {
		return keywordPasswordRE.ReplaceAllString(s, "${1}="+redacted)
	}
	u, err := url.Parse(s)
	if err != nil {
		return redacted
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	q := u.Query()
	for key := range q {
		if strings.EqualFold(key, "password") || strings.EqualFold(key, "sslpassword") {
			q.Set(key, redacted)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

package cli

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"

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
	// Every statement outbox runs is bounded (docs/operations.md,
	// "Running out"); migrations lift the bounds for their own session.
	dbutil.SetSessionTimeouts(poolConfig.ConnConfig, cfg.StatementTimeout, cfg.LockTimeout)
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

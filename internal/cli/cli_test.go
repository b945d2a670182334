package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/cli"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

type testBundle struct {
	env    map[string]string
	pool   *pgxpool.Pool
	schema string
}

// setup returns a bundle whose environment points outboxd at a migrated
// schema of its own, with the sandbox effects enabled.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, schema := testdb.MigratedSchema(t)
	return &testBundle{
		env: map[string]string{
			"DATABASE_URL":   testdb.URL(t),
			"OUTBOX_SANDBOX": "true",
			// The tests serve on loopback without tokens unless they set
			// some.
			"OUTBOX_ALLOW_NO_AUTH": "true",
			"OUTBOX_SCHEMA":        schema,
		},
		pool:   pool,
		schema: schema,
	}
}

// result is what one run of outboxd left.
type result struct {
	code           int
	stdout, stderr string
}

// run runs outboxd with the bundle's environment.
func (b *testBundle) run(t *testing.T, args ...string) *result {
	t.Helper()
	return runEnv(t, b.env, nil, args...)
}

// runEnv runs outboxd in process with env as its whole environment.
func runEnv(t *testing.T, env map[string]string, stdin io.Reader, args ...string) *result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Run(t.Context(), args, &cli.RunOpts{
		Lookuper: envconfig.MapLookuper(maps.Clone(env)),
		Stderr:   &stderr,
		Stdin:    stdin,
		Stdout:   &stdout,
	})
	return &result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// with returns a copy of env with more variables.
func with(env map[string]string, kv ...string) map[string]string {
	env = maps.Clone(env)
	for i := 0; i < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

// enqueued is enqueue's JSON answer.
type enqueued struct {
	outbox.Intent
	Duplicate bool `json:"duplicate"`
}

func decode[T any](t *testing.T, s string) *T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(s), &v), "output: %s", s)
	return &v
}

func TestHelp(t *testing.T) {
	t.Parallel()

	for _, args := range [][]string{
		{"--help"},
		{"-h"},
		{"help"},
		{"help", "intents"},
		{"serve", "--help"},
		{"migrate", "--help"},
		{"migrate", "up", "--help"},
		{"migrate", "down", "-h"},
		{"migrate", "status", "--help"},
		{"enqueue", "--help"},
		{"intents", "--help"},
		{"intents", "list", "--help"},
		{"intents", "show", "--help"},
		{"intents", "cancel", "-h"},
		{"intents", "resolve", "--help"},
		{"version", "--help"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			// No environment at all: help needs none.
			res := runEnv(t, nil, nil, args...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, "Usage:")
			require.Empty(t, res.stderr)
		})
	}

	t.Run("ListsEnvironment", func(t *testing.T) {
		t.Parallel()
		res := runEnv(t, nil, nil, "--help")
		for _, name := range []string{"DATABASE_URL", "OUTBOX_SCHEMA", "OUTBOX_EFFECT_TIMEOUT", "OUTBOX_SANDBOX"} {
			require.Contains(t, res.stdout, name)
		}
	})

	// Every row of the environment table names its variable: a setting
	// read from no variable (a field without an env tag) has no row.
	t.Run("EveryEnvironmentRowNamesAVariable", func(t *testing.T) {
		t.Parallel()
		res := runEnv(t, nil, nil, "--help")
		_, table, found := strings.Cut(res.stdout, "Environment (variable, default, meaning):\n")
		require.True(t, found, res.stdout)
		table, _, _ = strings.Cut(table, "\n\n")
		row := regexp.MustCompile(`^  [A-Z][A-Z0-9_]*[A-Z0-9] +\S`)
		rows := strings.Split(table, "\n")
		require.Greater(t, len(rows), 20, table)
		for _, line := range rows {
			require.Regexp(t, row, line, "a row of the environment table without a variable")
		}
	})
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()

	for name, tt := range map[string]struct {
		args   []string
		stderr string
	}{
		"UnknownCommand":     {[]string{"frobnicate"}, `unknown command "frobnicate"`},
		"UnknownSubcommand":  {[]string{"migrate", "sideways"}, `unknown subcommand "sideways"`},
		"MissingSubcommand":  {[]string{"intents"}, "missing subcommand"},
		"UnknownFlag":        {[]string{"intents", "list", "--bogus"}, "flag provided but not defined: --bogus"},
		"UnknownFlagOneDash": {[]string{"intents", "list", "-bogus"}, "flag provided but not defined: -bogus"},
		"BadFlagValue":       {[]string{"intents", "list", "--limit", "many"}, `invalid value "many" for flag --limit`},
		"LimitZero":          {[]string{"intents", "list", "--limit", "0"}, "--limit must be between 1 and 1000"},
		"LimitTooLarge":      {[]string{"intents", "list", "--limit=1001"}, "--limit must be between 1 and 1000"},
		"BadNamespace":       {[]string{"intents", "list", "--namespace", "a b"}, "--namespace invalid_key"},
		"DownAllWithoutYes":  {[]string{"migrate", "down", "--all"}, "add --yes to confirm"},
		"MissingKey":         {[]string{"intents", "show"}, "missing arguments"},
		"ExtraArgument":      {[]string{"intents", "cancel", "a", "b"}, `unexpected argument "b"`},
		"MissingEffect":      {[]string{"enqueue", "--key", "k", "--args", "{}"}, "--effect is required"},
		"MissingArgs":        {[]string{"enqueue", "--key", "k", "--effect", "noop"}, "--args is required"},
		"MissingOutcome":     {[]string{"intents", "resolve", "k"}, "--outcome is required"},
		"BadOutcome":         {[]string{"intents", "resolve", "k", "--outcome", "maybe"}, "--outcome must be succeeded, failed or retry"},
		"VersionArgument":    {[]string{"version", "now"}, `unexpected argument "now"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := runEnv(t, nil, nil, tt.args...)
			require.Equal(t, 2, res.code)
			require.Contains(t, res.stderr, tt.stderr)
			require.Contains(t, res.stderr, "--help' for usage")
			require.Empty(t, res.stdout)
		})
	}
}

func TestNoCommandPrintsUsage(t *testing.T) {
	t.Parallel()

	res := runEnv(t, nil, nil)
	require.Equal(t, 2, res.code)
	require.Empty(t, res.stdout)
	require.Contains(t, res.stderr, "Usage:\n  outboxd <command> [arguments]")
	require.Contains(t, res.stderr, "3 refused by the contract")
}

func TestVersion(t *testing.T) {
	t.Parallel()

	t.Run("Flag", func(t *testing.T) {
		t.Parallel()
		res := runEnv(t, nil, nil, "--version")
		require.Equal(t, 0, res.code, res.stderr)
		require.True(t, strings.HasPrefix(res.stdout, "outboxd "), res.stdout)
	})

	res := runEnv(t, nil, nil, "version")
	require.Equal(t, 0, res.code)
	require.Regexp(t, `^outboxd \S+ \(go\S+, \S+/\S+\)\n$`, res.stdout)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()

	base := map[string]string{"DATABASE_URL": "postgres://outbox:hunter2@127.0.0.1:1/outbox"}
	for name, tt := range map[string]struct {
		env  map[string]string
		line string
	}{
		"Duration":         {with(base, "OUTBOX_EFFECT_TIMEOUT", "abc"), `OUTBOX_EFFECT_TIMEOUT: expected a positive duration such as 30s, got "abc"`},
		"NegativeDuration": {with(base, "OUTBOX_RETENTION", "-1h"), `OUTBOX_RETENTION: expected a positive duration such as 168h, got "-1h"`},
		"ZeroDuration":     {with(base, "OUTBOX_AUTO_KEY_WINDOW", "0s"), `OUTBOX_AUTO_KEY_WINDOW: expected a positive duration such as 10m, got "0s"`},
		"ZeroHeartbeat":    {with(base, "OUTBOX_HEARTBEAT_INTERVAL", "0s"), `OUTBOX_HEARTBEAT_INTERVAL: expected a positive duration such as 1s, got "0s"`},
		"ZeroFetchPoll":    {with(base, "OUTBOX_FETCH_POLL_INTERVAL", "0s"), `OUTBOX_FETCH_POLL_INTERVAL: expected a positive duration such as 100ms, got "0s"`},
		"ZeroAttempts":     {with(base, "OUTBOX_MAX_ATTEMPTS", "0"), `OUTBOX_MAX_ATTEMPTS: expected a whole number of 1 or more, got "0"`},
		"Workers":          {with(base, "OUTBOX_WORKERS", "many"), `OUTBOX_WORKERS: expected a whole number from 1 to 10000, got "many"`},
		"Bool":             {with(base, "OUTBOX_AUTO_MIGRATE", "maybe"), `OUTBOX_AUTO_MIGRATE: expected true or false, got "maybe"`},
		"LogLevel":         {with(base, "OUTBOX_LOG_LEVEL", "loud"), `OUTBOX_LOG_LEVEL: expected debug, info, warn or error, got "loud"`},
		"RateLimit":        {with(base, "OUTBOX_RATE_LIMIT", "fast"), `OUTBOX_RATE_LIMIT: expected rps[:burst], such as 10 or 0.5:5, or off, got "fast"`},
		"LogFormat":        {with(base, "OUTBOX_LOG_FORMAT", "xml"), `OUTBOX_LOG_FORMAT: expected text or json, got "xml"`},
		"Schema":           {with(base, "OUTBOX_SCHEMA", "Bad-Schema"), `OUTBOX_SCHEMA: expected a schema name matching ^[a-z_][a-z0-9_]{0,39}$, got "Bad-Schema"`},
		"LongSchema":       {with(base, "OUTBOX_SCHEMA", strings.Repeat("s", 41)), `OUTBOX_SCHEMA: expected a schema name matching`},
		"Namespace":        {with(base, "OUTBOX_NAMESPACE", "a b"), `OUTBOX_NAMESPACE: expected a namespace of 1 to 64 printable ASCII characters without spaces, got "a b"`},
		"HTTPAddr":         {with(base, "OUTBOX_HTTP_ADDR", "localhost"), `OUTBOX_HTTP_ADDR: expected a listen address host:port such as 127.0.0.1:8080, got "localhost"`},
		"TokensSecret":     {with(base, "OUTBOX_API_TOKENS", "s3cr3t-token-0123456"), `OUTBOX_API_TOKENS: entry 1: expected token:namespace[:role]`},
		"TokenNamespace":   {with(base, "OUTBOX_API_TOKENS", "s3cr3t-token-0123456:a b"), `OUTBOX_API_TOKENS: entry 1: the namespace "a b" is invalid`},
		"TokenTooShort":    {with(base, "OUTBOX_API_TOKENS", "s3cr3t:ns"), `OUTBOX_API_TOKENS: entry 1: the token is shorter than 16 characters`},
		"TokenRole":        {with(base, "OUTBOX_API_TOKENS", "s3cr3t-token-0123456:ns:admin"), `OUTBOX_API_TOKENS: entry 1: the role "admin" is not reader, agent or operator`},
		"TokenTwice":       {with(base, "OUTBOX_API_TOKENS", "s3cr3t-token-0123456:a,s3cr3t-token-0123456:b"), `OUTBOX_API_TOKENS: entries 1 and 2 are the same token`},
		"TokenMisplaced":   {with(base, "OUTBOX_API_TOKENS", "abc:def:x"), `OUTBOX_API_TOKENS: entry 1: the token is shorter than 16 characters`},
		"TokensFile":       {with(base, "OUTBOX_API_TOKENS_FILE", "/nonexistent/tokens"), `OUTBOX_API_TOKENS_FILE: cannot read the file`},
		"DatabaseURLUnset": {nil, `DATABASE_URL: not set; expected a Postgres connection string`},
		"DatabaseURLBad":   {map[string]string{"DATABASE_URL": "postgres://outbox:hunter2@127.0.0.1:port/outbox"}, `DATABASE_URL: expected a Postgres connection string`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{
				{"migrate", "status"},
				{"serve"},
				{"intents", "list"},
				{"enqueue", "--key", "k", "--effect", "noop", "--args", "{}"},
			} {
				res := runEnv(t, tt.env, nil, args...)
				require.Equal(t, 1, res.code, "%v: %s", args, res.stderr)
				require.Empty(t, res.stdout)
				require.Equal(t, 1, strings.Count(res.stderr, "\n"), "one line: %q", res.stderr)
				require.True(t, strings.HasPrefix(res.stderr, "outboxd: "+tt.line), "%v: got %q, want %q", args, res.stderr, tt.line)
				require.NotContains(t, res.stderr, "hunter2")
				require.NotContains(t, res.stderr, "s3cr3t")
			}
		})
	}

	t.Run("EmptyMeansDefault", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		res := runEnv(t, with(bundle.env, "OUTBOX_LOG_LEVEL", "", "OUTBOX_API_TOKENS", ""), nil, "migrate", "status")
		require.Equal(t, 0, res.code, res.stderr)
	})
}

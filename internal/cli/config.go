package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sethvargo/go-envconfig"

	"github.com/outbox-dev/outbox"
)

// Config is outboxd's configuration, read from the environment (SPEC section
// 8). Each field's tags name its variable and default (env), say what a valid
// value looks like (expect: the error for a bad value quotes it) and describe
// it for --help (help). Fields tagged secret:"true" hold secrets: their values
// never appear in errors or logs.
//
// A variable set to the empty string counts as unset, so that OUTBOX_SCHEMA=
// means the default rather than an invalid schema.
type Config struct {
	// APITokens maps each API bearer token to the namespace it acts for.
	// Defaults to none. Not used yet: the HTTP API comes later.
	APITokens map[string]string `env:"OUTBOX_API_TOKENS" secret:"true" expect:"token:namespace pairs separated by commas" help:"API bearer tokens, token:namespace,... (not used yet)"`

	// AutoKeyWindow is the window of MCP's automatic idempotency key.
	// Defaults to 10m. Not used yet.
	AutoKeyWindow time.Duration `env:"OUTBOX_AUTO_KEY_WINDOW, default=10m" expect:"a positive duration such as 10m" help:"window of the automatic MCP key (not used yet)"`

	// AutoMigrate lets serve apply pending migrations at start. Defaults to
	// false.
	AutoMigrate bool `env:"OUTBOX_AUTO_MIGRATE, default=false" expect:"true or false" help:"let serve apply pending migrations at start"`

	// DatabaseURL is the Postgres connection string. Required by every
	// command that touches the database; defaults to none.
	DatabaseURL string `env:"DATABASE_URL" secret:"true" expect:"a Postgres connection string such as postgres://user@localhost:5432/outbox" help:"Postgres connection string (required by serve, migrate, enqueue, intents)"`

	// EffectTimeout is one attempt's deadline, and the base of the claim's
	// lease. Defaults to 30s.
	EffectTimeout time.Duration `env:"OUTBOX_EFFECT_TIMEOUT, default=30s" expect:"a positive duration such as 30s" help:"one attempt's deadline; also the claim lease"`

	// HTTPAddr is serve's listen address. Defaults to 127.0.0.1:8080.
	HTTPAddr string `env:"OUTBOX_HTTP_ADDR, default=127.0.0.1:8080" expect:"a listen address host:port such as 127.0.0.1:8080" help:"serve's listen address (port 0 picks a free port)"`

	// LogFormat is text or json. Defaults to text.
	LogFormat string `env:"OUTBOX_LOG_FORMAT, default=text" expect:"text or json" help:"log format: text or json"`

	// LogLevel is debug, info, warn or error. Defaults to info.
	LogLevel string `env:"OUTBOX_LOG_LEVEL, default=info" expect:"debug, info, warn or error" help:"log level: debug, info, warn or error"`

	// MaxAttempts is the number of attempts per intent. Defaults to 25.
	MaxAttempts int `env:"OUTBOX_MAX_ATTEMPTS, default=25" expect:"a whole number of 1 or more" help:"attempts per intent"`

	// Namespace is the namespace the command line acts for. Defaults to
	// default.
	Namespace string `env:"OUTBOX_NAMESPACE, default=default" expect:"a namespace of 1 to 64 printable ASCII characters without spaces" help:"namespace the command line acts for"`

	// Retention is how long terminal intents, and so their keys, are kept.
	// Defaults to 168h.
	Retention time.Duration `env:"OUTBOX_RETENTION, default=168h" expect:"a positive duration such as 168h" help:"how long terminal intents (and so their keys) are kept"`

	// Sandbox enables the sandbox effects (noop, noop_reconcilable,
	// noop_at_most_once). Defaults to false.
	Sandbox bool `env:"OUTBOX_SANDBOX, default=false" expect:"true or false" help:"enable the sandbox effects noop, noop_reconcilable and noop_at_most_once"`

	// Schema holds River's tables and outbox's. Defaults to outbox.
	Schema string `env:"OUTBOX_SCHEMA, default=outbox" expect:"a schema name matching ^[a-z_][a-z0-9_]{0,39}$" help:"schema of River's tables and outbox's"`

	// UIPassword is River UI's basic auth password. Defaults to none. Not
	// used yet.
	UIPassword string `env:"OUTBOX_UI_PASSWORD" secret:"true" expect:"a password" help:"River UI basic auth password (not used yet)"`

	// UIUser is River UI's basic auth user. Defaults to none. Not used yet.
	UIUser string `env:"OUTBOX_UI_USER" expect:"a user name" help:"River UI basic auth user (not used yet)"`

	// Workers is the number of River workers per effect queue. Defaults to
	// 50.
	Workers int `env:"OUTBOX_WORKERS, default=50" expect:"a whole number from 1 to 10000" help:"River workers per effect queue"`
}

// workersMax bounds OUTBOX_WORKERS, and so serve's pool size.
const workersMax = 10000

// schemaRE is what OUTBOX_SCHEMA must match: a name that needs no quoting
// and leaves room in Postgres's 63-byte identifiers for the NOTIFY channels
// derived from it.
var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// ConfigError is a bad configuration value: the variable and what it
// expected. Its message is one line, free of secrets.
type ConfigError struct {
	// Var is the environment variable.
	Var string
	// Message says what was expected, and what was found unless the
	// variable holds a secret.
	Message string
}

func (e *ConfigError) Error() string { return e.Var + ": " + e.Message }

// nonEmptyLookuper reports variables set to the empty string as unset.
type nonEmptyLookuper struct{ envconfig.Lookuper }

func (l nonEmptyLookuper) Lookup(key string) (string, bool) {
	v, ok := l.Lookuper.Lookup(key)
	return v, ok && v != ""
}

// loadConfig reads and checks the configuration. A bad value is reported as
// a *ConfigError.
func loadConfig(ctx context.Context, lookuper envconfig.Lookuper) (*Config, error) {
	lookuper = nonEmptyLookuper{lookuper}
	var cfg Config
	if err := envconfig.ProcessWith(ctx, &envconfig.Config{Target: &cfg, Lookuper: lookuper}); err != nil {
		// go-envconfig's errors start with the field's name and may quote
		// the value, a secret perhaps; name the variable instead and quote
		// the value only when it is not a secret.
		field, _, _ := strings.Cut(err.Error(), ":")
		if _, ok := reflect.TypeFor[Config]().FieldByName(field); ok {
			return nil, invalid(lookuper, field)
		}
		return nil, fmt.Errorf("error reading configuration: %w", err)
	}
	if err := cfg.validate(lookuper); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// validate checks what go-envconfig's decoding does not: ranges, enums and
// formats.
func (c *Config) validate(lookuper envconfig.Lookuper) error {
	checks := []struct {
		field string
		ok    bool
	}{
		{"APITokens", validTokens(c.APITokens)},
		{"AutoKeyWindow", c.AutoKeyWindow > 0},
		{"DatabaseURL", c.DatabaseURL == "" || validDatabaseURL(c.DatabaseURL)},
		{"EffectTimeout", c.EffectTimeout > 0},
		{"HTTPAddr", validAddr(c.HTTPAddr)},
		{"LogFormat", c.LogFormat == "text" || c.LogFormat == "json"},
		{"LogLevel", validLevel(c.LogLevel)},
		{"MaxAttempts", c.MaxAttempts >= 1},
		{"Namespace", outbox.ValidateNamespace(c.Namespace) == nil},
		{"Retention", c.Retention > 0},
		{"Schema", schemaRE.MatchString(c.Schema)},
		{"Workers", c.Workers >= 1 && c.Workers <= workersMax},
	}
	for _, check := range checks {
		if !check.ok {
			return invalid(lookuper, check.field)
		}
	}
	return nil
}

// requireDatabaseURL is the check of the commands that need the database.
func (c *Config) requireDatabaseURL() error {
	if c.DatabaseURL == "" {
		return &ConfigError{Var: "DATABASE_URL", Message: "not set; expected " + fieldTag("DatabaseURL", "expect")}
	}
	return nil
}

// invalid is the *ConfigError for the field's variable as the lookuper has
// it.
func invalid(lookuper envconfig.Lookuper, field string) error {
	name := envName(field)
	msg := "expected " + fieldTag(field, "expect")
	if value, ok := lookuper.Lookup(name); ok && fieldTag(field, "secret") != "true" {
		msg += fmt.Sprintf(", got %q", value)
	}
	return &ConfigError{Var: name, Message: msg}
}

// fieldTag returns the tag key of Config's field.
func fieldTag(field, key string) string {
	f, ok := reflect.TypeFor[Config]().FieldByName(field)
	if !ok {
		panic("cli: no Config field " + field)
	}
	return f.Tag.Get(key)
}

// envName returns the variable of Config's field, and envDefault its
// default.
func envName(field string) string {
	name, _, _ := strings.Cut(fieldTag(field, "env"), ",")
	return name
}

func envDefault(field string) string {
	_, opts, _ := strings.Cut(fieldTag(field, "env"), ",")
	_, def, _ := strings.Cut(opts, "default=")
	return def
}

func validTokens(tokens map[string]string) bool {
	for token, namespace := range tokens {
		if token == "" || outbox.ValidateNamespace(namespace) != nil {
			return false
		}
	}
	return true
}

func validAddr(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port != ""
}

func validLevel(level string) bool {
	_, err := parseLevel(level)
	return err == nil
}

func validDatabaseURL(url string) bool {
	_, err := parseDatabaseURL(url)
	return err == nil
}

// errUnparsableDatabaseURL is parseDatabaseURL's error. It says only that
// the string could not be parsed: pgx's own error quotes the string, and
// redacts its password only as best it can.
var errUnparsableDatabaseURL = errors.New("DATABASE_URL: cannot be parsed as a Postgres connection string")

// parseDatabaseURL parses a connection string into a pool configuration.
func parseDatabaseURL(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errUnparsableDatabaseURL
	}
	return cfg, nil
}

// writeEnvHelp lists the variables, their defaults and meaning.
func writeEnvHelp(w io.Writer) {
	t := reflect.TypeFor[Config]()
	fields := make([]reflect.StructField, t.NumField())
	for i := range fields {
		fields[i] = t.Field(i)
	}
	slices.SortFunc(fields, func(a, b reflect.StructField) int {
		return strings.Compare(envName(a.Name), envName(b.Name))
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		def := envDefault(f.Name)
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", envName(f.Name), def, f.Tag.Get("help"))
	}
	tw.Flush() //nolint:errcheck // the writer's errors are its own
}

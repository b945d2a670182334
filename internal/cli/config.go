package cli

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sethvargo/go-envconfig"

	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/outbox"
)

// Config is outboxd's configuration, read from the environment (README,
// "Operations"). Each field's tags name its variable and default (env), say
// what a valid value looks like (expect: the error for a bad value quotes it)
// and describe it for --help (help). Fields tagged secret:"true" hold secrets: their values
// never appear in errors or logs.
//
// A variable set to the empty string counts as unset, so that OUTBOX_SCHEMA=
// means the default rather than an invalid schema.
type Config struct {
	// AdminAddr, when set, is a second listen address for /healthz,
	// /readyz, /metrics and River UI, which OUTBOX_HTTP_ADDR then does not
	// serve. Defaults to none: one listener serves everything.
	AdminAddr string `env:"OUTBOX_ADMIN_ADDR" expect:"a listen address host:port such as 127.0.0.1:9090" help:"separate listener for /metrics, /riverui/ and the health endpoints; OUTBOX_HTTP_ADDR then serves only /v1/ and /mcp"`

	// AllowNoAuth lets serve run without API tokens, on a loopback address
	// only, acting as namespace default with the operator role. Defaults
	// to false: without tokens, serve refuses to start.
	AllowNoAuth bool `env:"OUTBOX_ALLOW_NO_AUTH, default=false" expect:"true or false" help:"serve without API tokens (loopback only): for development"`

	// APITokens are the API bearer tokens, token:namespace[:role] entries
	// separated by commas (role: agent, the default; operator; reader).
	// Defaults to none.
	APITokens string `env:"OUTBOX_API_TOKENS" secret:"true" expect:"token:namespace[:role] entries separated by commas, each token at least 16 characters" help:"API bearer tokens, token:namespace[:role],...; each token picks its namespace and role (agent, operator, reader)"`

	// APITokensFile names a file of API tokens, one entry a line (# starts a
	// comment); an entry may give the token's hash instead of the token,
	// sha256:<64 hex>:namespace[:role]. Defaults to none.
	APITokensFile string `env:"OUTBOX_API_TOKENS_FILE" expect:"the path of a readable file of token entries" help:"API tokens from a file, one token:namespace[:role] or sha256:<hex>:namespace[:role] a line"`

	// Approval names the intents that wait for an operator's approval
	// before any worker runs them: rules separated by commas, each an
	// effect alone or an effect and one comparison of a top-level argument
	// (charge:amount>=10000,webhook:endpoint=payouts,email). serve writes
	// them to the database at start, where every enqueue path obeys them;
	// unset leaves the rules stored there in force, "none" removes them.
	Approval string `env:"OUTBOX_APPROVAL" expect:"approval rules such as charge:amount>=10000,email (effect[:arg OP value], OP one of = != > >= < <=), or none" help:"intents that wait for an operator's approval: effect[:arg OP value],...; unset keeps the rules in the database, none removes them"`

	// ApprovalTTL is how long an intent may await approval before it is
	// cancelled with error approval_expired. Defaults to 24h.
	ApprovalTTL time.Duration `env:"OUTBOX_APPROVAL_TTL, default=24h" expect:"a positive duration such as 24h" help:"how long an intent may await approval before it is cancelled (approval_expired)"`

	// ApprovalWebhook names an endpoint of OUTBOX_WEBHOOKS that is told,
	// by a signed webhook, of every intent entering awaiting_approval.
	// Defaults to none.
	ApprovalWebhook string `env:"OUTBOX_APPROVAL_WEBHOOK" expect:"the name of an endpoint of OUTBOX_WEBHOOKS" help:"webhook endpoint (a name of OUTBOX_WEBHOOKS) told of every intent awaiting approval"`

	// AutoKeyWindow is the window of MCP's automatic idempotency key.
	// Defaults to 10m.
	AutoKeyWindow time.Duration `env:"OUTBOX_AUTO_KEY_WINDOW, default=10m" expect:"a positive duration such as 10m" help:"window of the automatic MCP key: identical keyless tool calls within it are one action"`

	// AutoMigrate lets serve apply pending migrations at start. Defaults to
	// false.
	AutoMigrate bool `env:"OUTBOX_AUTO_MIGRATE, default=false" expect:"true or false" help:"let serve apply pending migrations at start"`

	// BatchFirstAttempts runs the first attempts of deduplicated effects'
	// intents in batches, one River job a batch (false sets
	// dispatcher.Config's DisableBatchFirstAttempts). Defaults to true.
	BatchFirstAttempts bool `env:"OUTBOX_BATCH_FIRST_ATTEMPTS, default=true" expect:"true or false" help:"run deduplicated effects' first attempts in batches, one River job a batch; false gives every intent a job of its own (docs/operations.md)"`

	// DatabaseURL is the Postgres connection string. Required by every
	// command that touches the database; defaults to none.
	DatabaseURL string `env:"DATABASE_URL" secret:"true" expect:"a Postgres connection string such as postgres://user@localhost:5432/outbox" help:"Postgres connection string (required by serve, migrate, enqueue, intents)"`

	// EffectTimeout is one attempt's deadline, and the base of the claim's
	// lease. Defaults to 30s.
	EffectTimeout time.Duration `env:"OUTBOX_EFFECT_TIMEOUT, default=30s" expect:"a positive duration such as 30s" help:"one attempt's deadline; also the claim lease"`

	// EffectsFile is a file of declared HTTP effects (docs/effects.md,
	// "Declaring an HTTP effect"), loaded by serve, mcp, enqueue and demo.
	// Defaults to none.
	EffectsFile string `env:"OUTBOX_EFFECTS_FILE" expect:"a readable YAML or JSON file of declared effects" help:"declared HTTP effects (docs/effects.md); outboxd effects check FILE validates one"`

	// EffectsLock is the MCP upstreams' pinned catalogue, written by
	// outboxd effects pin. Defaults to EffectsFile + ".lock".
	EffectsLock string `env:"OUTBOX_EFFECTS_LOCK" expect:"a path ending in .lock, with OUTBOX_EFFECTS_FILE set" help:"the MCP upstreams' pinned catalogue (default: the effects file's path plus .lock), written by outboxd effects pin"`

	// FetchPollInterval is how often each effect's River queue looks for
	// jobs that no notification announced. Shorter trims the tail of a
	// burst (River notifies a queue at most once per fetch cooldown);
	// longer costs less when idle: every queue of every replica polls.
	// Defaults to 100ms.
	FetchPollInterval time.Duration `env:"OUTBOX_FETCH_POLL_INTERVAL, default=100ms" expect:"a positive duration such as 100ms" help:"how often each effect's queue looks for jobs no notification announced: shorter trims the tail of bursts, longer costs less when idle"`

	// HeartbeatInterval is how often serve writes its heartbeat and takes
	// over the running jobs of processes that died: a process is dead once
	// its liveness session is gone and its heartbeat two intervals old.
	// Defaults to 1s.
	HeartbeatInterval time.Duration `env:"OUTBOX_HEARTBEAT_INTERVAL, default=1s" expect:"a positive duration such as 1s" help:"how often serve beats and takes over the running jobs of dead processes (about two intervals after a crash)"`

	// HTTPAddr is serve's listen address. Defaults to 127.0.0.1:8080.
	HTTPAddr string `env:"OUTBOX_HTTP_ADDR, default=127.0.0.1:8080" expect:"a listen address host:port such as 127.0.0.1:8080" help:"serve's listen address (port 0 picks a free port)"`

	// LockTimeout is every database session's lock_timeout: how long one
	// statement waits for a lock (a migration's, an operator's long
	// transaction) before it fails, and the API answers 503 unavailable.
	// 0 leaves the server's setting. Defaults to 10s
	// (dbutil.LockTimeoutDefault).
	LockTimeout time.Duration `env:"OUTBOX_LOCK_TIMEOUT, default=10s" expect:"a duration such as 10s, or 0 for the server's setting" help:"lock_timeout of every database session: a statement waiting longer for a lock fails (the API answers 503 unavailable)"`

	// LogFormat is text or json. Defaults to text.
	LogFormat string `env:"OUTBOX_LOG_FORMAT, default=text" expect:"text or json" help:"log format: text or json"`

	// LogLevel is debug, info, warn or error. Defaults to info.
	LogLevel string `env:"OUTBOX_LOG_LEVEL, default=info" expect:"debug, info, warn or error" help:"log level: debug, info, warn or error"`

	// MaxAttempts is the number of attempts per intent. Defaults to 25.
	MaxAttempts int `env:"OUTBOX_MAX_ATTEMPTS, default=25" expect:"a whole number of 1 or more" help:"attempts per intent"`

	// MaxWaits bounds the long-poll waits in progress at once, shared
	// fairly by namespace. Defaults to 1000.
	MaxWaits int `env:"OUTBOX_MAX_WAITS, default=1000" expect:"a whole number from 1 to 100000" help:"concurrent long-poll waits (?wait=, get_intent's wait_seconds), shared fairly by namespace"`

	// ModelKeyGuard is what MCP's tools (and enqueues sent with
	// Idempotency-Key-Source: model) do with a model's fresh key for an
	// action recorded within AutoKeyWindow under another key. Defaults to
	// refuse.
	ModelKeyGuard string `env:"OUTBOX_MODEL_KEY_GUARD, default=refuse" expect:"refuse, replay or off" help:"a model's fresh key for an action just recorded under another key: refuse (possible_duplicate), replay (answer with the earlier intent) or off"`

	// Namespace is the namespace the command line acts for. Defaults to
	// default.
	Namespace string `env:"OUTBOX_NAMESPACE, default=default" expect:"a namespace of 1 to 64 printable ASCII characters without spaces" help:"namespace the command line acts for"`

	// PollOnly says that DATABASE_URL goes through a transaction pooler
	// (PgBouncer with pool_mode=transaction), whose connections are not
	// sessions: River polls for jobs instead of listening, pgx sends no
	// named prepared statement (default_query_exec_mode=exec unless the URL
	// names another), the statement and lock timeouts are left to the
	// role's settings, and serve and migrate hold what needs a session on
	// SessionDatabaseURL, which they then require. Defaults to false
	// (docs/operations.md, "Behind PgBouncer").
	PollOnly bool `env:"OUTBOX_POLL_ONLY, default=false" expect:"true or false" help:"DATABASE_URL is a transaction pooler's (PgBouncer pool_mode=transaction): River polls, no named prepared statements, timeouts from the role; serve and migrate need OUTBOX_SESSION_DATABASE_URL"`

	// PublicURL is the URL people reach outboxd at, for links handed to
	// MCP hosts (a URL-mode elicitation opening the console's page of an
	// intent that an operator must approve) and printed by commands.
	// Defaults to none: no such links.
	PublicURL string `env:"OUTBOX_PUBLIC_URL" expect:"an http or https URL, such as https://outbox.example.com" help:"the URL people reach outboxd's console at, for links handed to MCP hosts (an operator's approval page) and printed by commands"`

	// RateLimit bounds each API token's enqueues over HTTP and /mcp,
	// "rps[:burst]". Defaults to off.
	RateLimit string `env:"OUTBOX_RATE_LIMIT" expect:"rps[:burst], such as 10 or 0.5:5, or off" help:"per-token enqueue rate over HTTP and /mcp (rps[:burst]); beyond it, 429 rate_limited with Retry-After"`

	// ReconcileInterval is how often River's leader repairs intents whose
	// River job is finished or gone. Defaults to 10s.
	ReconcileInterval time.Duration `env:"OUTBOX_RECONCILE_INTERVAL, default=10s" expect:"a positive duration such as 10s" help:"how often the leader repairs intents whose River job is finished or gone"`

	// Retention is how long terminal intents, and so their keys, are kept.
	// Defaults to 168h.
	Retention time.Duration `env:"OUTBOX_RETENTION, default=168h" expect:"a positive duration such as 168h" help:"how long terminal intents (and so their keys) are kept"`

	// SessionDatabaseURL is where serve and migrate hold what needs a
	// session of its own: the process's liveness lock, the LISTEN
	// connections of the drain and of the waits, and the migrations' lock.
	// A direct connection or a session-mode pooler's; required with
	// PollOnly by serve and migrate. Defaults to DATABASE_URL.
	SessionDatabaseURL string `env:"OUTBOX_SESSION_DATABASE_URL" secret:"true" expect:"a Postgres connection string, direct or through a session-mode pooler" help:"connection string for what needs a session (liveness lock, LISTEN, migrations) when DATABASE_URL is a transaction pooler's (OUTBOX_POLL_ONLY)"`

	// StateKey is the key that derives MCP task ids and seals requestState
	// (approvals in the host), 32 bytes in base64; every replica needs the
	// same. Defaults to the key migrate generated in the schema.
	StateKey string `env:"OUTBOX_STATE_KEY" secret:"true" expect:"32 bytes in base64, such as the output of: openssl rand -base64 32" help:"key sealing MCP requestState and deriving task ids (default: the one generated at migrate)"`

	// SMTPAddr is the SMTP server of the email effect, host:port; setting
	// it enables email. Defaults to none.
	SMTPAddr string `env:"OUTBOX_SMTP_ADDR" expect:"host:port such as smtp.example.com:587" help:"SMTP server host:port; enables the email effect"`

	// SMTPFrom is the sender of emails, required with SMTPAddr. Defaults to
	// none.
	SMTPFrom string `env:"OUTBOX_SMTP_FROM" expect:"an email address such as Shop <shop@example.com>" help:"sender of emails (required with OUTBOX_SMTP_ADDR)"`

	// SMTPPassword is the SMTP AUTH password. Defaults to none.
	SMTPPassword string `env:"OUTBOX_SMTP_PASSWORD" secret:"true" expect:"a password" help:"SMTP AUTH password"`

	// SMTPTLS is how the SMTP connection is secured: starttls, tls
	// (implicit, port 465) or none. Defaults to starttls.
	SMTPTLS string `env:"OUTBOX_SMTP_TLS, default=starttls" expect:"starttls, tls or none" help:"SMTP security: starttls, tls (implicit) or none"`

	// SMTPUser turns on SMTP AUTH with this user. Defaults to none.
	SMTPUser string `env:"OUTBOX_SMTP_USER" expect:"a user name" help:"SMTP AUTH user (AUTH is used when set)"`

	// Sandbox starts local stand-ins for every provider (a Stripe-like
	// server, an SMTP sink, a Zendesk-like server, a webhook receiver) and
	// points charge, email, ticket and webhook at them, ignoring the
	// provider variables; it also enables the noop effects (noop,
	// noop_reconcilable, noop_at_most_once). Defaults to false.
	Sandbox bool `env:"OUTBOX_SANDBOX, default=false" expect:"true or false" help:"run every effect against local stand-in providers (ignoring the provider variables), and enable the noop effects"`

	// Schema holds River's tables and outbox's. Defaults to outbox.
	Schema string `env:"OUTBOX_SCHEMA, default=outbox" expect:"a schema name matching ^[a-z_][a-z0-9_]{0,39}$" help:"schema of River's tables and outbox's"`

	// StatementTimeout is every database session's statement_timeout, so
	// that a stuck database cannot hold a worker or a request forever. 0
	// leaves the server's setting. Defaults to 30s
	// (dbutil.StatementTimeoutDefault).
	StatementTimeout time.Duration `env:"OUTBOX_STATEMENT_TIMEOUT, default=30s" expect:"a duration such as 30s, or 0 for the server's setting" help:"statement_timeout of every database session (not migrate's): a statement running longer fails (the API answers 503 unavailable)"`

	// StripeKey is the Stripe secret key; setting it enables charge.
	// Defaults to none.
	StripeKey string `env:"OUTBOX_STRIPE_KEY" secret:"true" expect:"a Stripe secret key such as sk_live_..." help:"Stripe secret key; enables the charge effect"`

	// StripeURL is Stripe's API. Defaults to https://api.stripe.com.
	StripeURL string `env:"OUTBOX_STRIPE_URL, default=https://api.stripe.com" expect:"an http or https URL such as https://api.stripe.com" help:"Stripe API base URL (stripe-mock or a sandbox in tests)"`

	// TLSCertFile and TLSKeyFile make OUTBOX_HTTP_ADDR serve TLS: a PEM
	// certificate (with its chain) and its key. Both or neither. Defaults
	// to none: plain HTTP, for a reverse proxy that terminates TLS.
	TLSCertFile string `env:"OUTBOX_TLS_CERT_FILE" expect:"the path of a readable PEM certificate file" help:"serve TLS on OUTBOX_HTTP_ADDR with this certificate (with OUTBOX_TLS_KEY_FILE)"`

	// TLSKeyFile is the key of TLSCertFile.
	TLSKeyFile string `env:"OUTBOX_TLS_KEY_FILE" secret:"true" expect:"the path of a readable PEM key file" help:"the key of OUTBOX_TLS_CERT_FILE"`

	// TraceSQL makes every SQL statement of serve a span (otelpgx), when
	// the OTEL_* variables turn traces on: its text, never its
	// parameters. Defaults to false: statements are many, and the
	// attempts' spans say what an intent did.
	TraceSQL bool `env:"OUTBOX_TRACE_SQL, default=false" expect:"true or false" help:"with traces on (OTEL_TRACES_EXPORTER), a span for every SQL statement (its text, never its parameters)"`

	// UIPassword is River UI's basic auth password, required with UIUser.
	// Defaults to none.
	UIPassword string `env:"OUTBOX_UI_PASSWORD" secret:"true" expect:"a password of at least 16 characters" help:"River UI (/riverui/) basic auth password (at least 16 characters)"`

	// UIUser is River UI's basic auth user. Without it (and UIPassword),
	// serve listens only on loopback. Defaults to none.
	UIUser string `env:"OUTBOX_UI_USER" expect:"a user name" help:"River UI (/riverui/) basic auth user; without it serve listens only on loopback"`

	// WebhookSecret signs webhooks (Standard Webhooks), required with
	// Webhooks. Defaults to none.
	WebhookSecret string `env:"OUTBOX_WEBHOOK_SECRET" secret:"true" expect:"whsec_ followed by base64" help:"webhook signing secret, whsec_... (required with OUTBOX_WEBHOOKS)"`

	// Webhooks are the webhook effect's endpoints, name=url[;dedupe],...;
	// setting them enables webhook. Secret, since a URL can carry a token.
	// Defaults to none.
	Webhooks string `env:"OUTBOX_WEBHOOKS" secret:"true" expect:"name=url[;dedupe] entries separated by commas" help:"webhook endpoints, name=url[;dedupe],...; enables the webhook effect"`

	// Workers is the number of River workers per effect queue. Defaults to
	// 50.
	Workers int `env:"OUTBOX_WORKERS, default=50" expect:"a whole number from 1 to 10000" help:"River workers per effect queue"`

	// ZendeskEmail is the Zendesk agent of the API token, required with
	// ZendeskURL. Defaults to none.
	ZendeskEmail string `env:"OUTBOX_ZENDESK_EMAIL" expect:"the email address of a Zendesk agent" help:"Zendesk agent whose API token is used (required with OUTBOX_ZENDESK_URL)"`

	// ZendeskToken is the Zendesk API token, required with ZendeskURL.
	// Defaults to none.
	ZendeskToken string `env:"OUTBOX_ZENDESK_TOKEN" secret:"true" expect:"a Zendesk API token" help:"Zendesk API token (required with OUTBOX_ZENDESK_URL)"`

	// ZendeskURL is the Zendesk account, such as https://acme.zendesk.com;
	// setting it enables ticket. Defaults to none.
	ZendeskURL string `env:"OUTBOX_ZENDESK_URL" expect:"an http or https URL such as https://acme.zendesk.com" help:"Zendesk account URL; enables the ticket effect"`

	// lookuper is where the configuration was read from: declared effects
	// read their {env.*} variables from it too.
	lookuper envconfig.Lookuper

	// What validate parsed, kept so that no value is parsed twice:
	// Approval's rules (nil when unset), LogLevel, DatabaseURL (nil when
	// unset; connect takes a copy), RateLimit, the tokens of APITokens and
	// APITokensFile, and Webhooks' endpoints.
	approvalRules []outbox.ApprovalRule
	logLevel      slog.Level
	poolConfig    *pgxpool.Config
	// sessionPoolConfig is SessionDatabaseURL's, nil when unset.
	sessionPoolConfig *pgxpool.Config
	rateLimit         httpapi.RateLimit
	tokens            []access.Token
	webhooks          []webhook.Endpoint
}

// Defaults of outboxd's own settings; every other setting's default is a
// constant of the package that takes it (TestEnvDefaults holds the tags to
// them).
const (
	HTTPAddrDefault  = "127.0.0.1:8080"
	LogFormatDefault = "text"
	LogLevelDefault  = "info"
)

// workersMax bounds OUTBOX_WORKERS, and so serve's pool size.
const workersMax = 10000

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

// ApprovalRules returns OUTBOX_APPROVAL's rules, nil when it is unset (the
// rules stored in the database stay in force).
func (c *Config) ApprovalRules() []outbox.ApprovalRule { return c.approvalRules }

// setDatabaseURL sets DatabaseURL after loadConfig (the demo's throwaway
// cluster), parsing it as validate does.
func (c *Config) setDatabaseURL(url string) error {
	poolConfig, err := parseDatabaseURL(url)
	if err != nil {
		return err
	}
	c.DatabaseURL, c.poolConfig = url, poolConfig
	return nil
}

// requireDatabaseURL is the check of the commands that need the database.
func (c *Config) requireDatabaseURL() error {
	if c.DatabaseURL == "" {
		return &ConfigError{Var: "DATABASE_URL", Message: "not set; expected " + fieldTag("DatabaseURL", "expect")}
	}
	return nil
}

// Tokens returns the API tokens of OUTBOX_API_TOKENS and
// OUTBOX_API_TOKENS_FILE.
func (c *Config) Tokens() []access.Token { return c.tokens }

// RateLimitValue returns OUTBOX_RATE_LIMIT, parsed.
func (c *Config) RateLimitValue() httpapi.RateLimit { return c.rateLimit }

// Package effectset builds the effects a process runs, and owns them for
// its lifetime: the built-in providers that are configured, the sandbox's
// noop effects and stand-in providers (OUTBOX_SANDBOX), the declared HTTP
// effects of the effects file (effects/declared) and its MCP upstreams
// bound to their lock (internal/upstream). serve, mcp, enqueue, the demo
// and `outboxd effects` all build theirs with Build, so they agree on what
// is enabled; Close stops what Build started.
package effectset

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/metrics"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/upstream"
	"github.com/outbox-dev/outbox/outbox"
)

// Config configures Build.
type Config struct {
	// ApprovalRules are the process's approval rules (OUTBOX_APPROVAL): a
	// rule on a declared effect or an upstream tool must name an argument
	// of its schema, numeric for < and >. Defaults to none.
	ApprovalRules []outbox.ApprovalRule

	// EffectTimeout is the attempts' deadline (dispatcher.Config.EffectTimeout),
	// a declared request's default and maximum timeout. Defaults to
	// effects.TimeoutDefault.
	EffectTimeout time.Duration

	// EffectsFile is the file of declared HTTP effects and MCP upstreams
	// (OUTBOX_EFFECTS_FILE). Defaults to none.
	EffectsFile string

	// EffectsLock is the upstreams' lock (OUTBOX_EFFECTS_LOCK). Defaults to
	// EffectsFile's path plus .lock.
	EffectsLock string

	// Logger logs what is started and warned about. Defaults to a logger
	// that discards.
	Logger *slog.Logger

	// LookupEnvFunc reads the effects file's {env.*} variables. Defaults to
	// os.LookupEnv.
	LookupEnvFunc func(name string) (string, bool)

	// LoopbackOnly sends declared effects and upstreams only to loopback
	// hosts, as the sandbox does (the demo sets it). Defaults to false.
	LoopbackOnly bool

	// Pool is where the sandbox's noop effects record what they do; nil
	// when nothing is executed (validation). Defaults to none.
	Pool *pgxpool.Pool

	// Providers are where the built-in provider effects send: a provider
	// is enabled when its setting is (Stripe's key, SMTP's address,
	// Zendesk's URL, a webhook endpoint). Sandbox replaces them. Defaults
	// to none.
	Providers Providers

	// Retention is how long terminal intents are kept
	// (dispatcher.Config.Retention): a dedupe window longer than it is
	// refused. Zero skips the check.
	Retention time.Duration

	// Sandbox enables the sandbox's noop effects and points the provider
	// effects at its stand-ins (OUTBOX_SANDBOX=true). Defaults to false.
	Sandbox bool

	// Schema is the schema of outbox's tables, where the noop effects keep
	// their records. Defaults to outbox.SchemaDefault.
	Schema string

	// StartSandbox, with Sandbox, starts the sandbox's stand-in providers
	// on loopback ports and points the effects at them: for a process
	// that executes intents (serve). Without it they point at addresses no
	// one listens on, which is enough to validate intents (enqueue, mcp),
	// since nothing is sent. Defaults to false.
	StartSandbox bool

	// Version is outboxd's version, sent to MCP upstreams in the handshake.
	// Defaults to none.
	Version string
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.LookupEnvFunc == nil {
		out.LookupEnvFunc = os.LookupEnv
	}
	if out.Schema == "" {
		out.Schema = outbox.SchemaDefault
	}
	return &out
}

// Set is the effects a process runs, built by Build: its registry, its
// MCP upstreams and what serves them. Close it when done.
type Set struct {
	// Metrics are the counters the set counts into.
	Metrics *metrics.Effects

	// Providers are where the provider effects send (the sandbox's
	// stand-ins with Sandbox).
	Providers Providers

	// Registry holds every enabled effect, possibly none.
	Registry *effects.Registry

	// Sandbox is the sandbox's stand-in providers, started with
	// StartSandbox; nil otherwise.
	Sandbox *sandbox.Sandbox

	// Upstreams are the effects file's MCP upstreams bound to their lock:
	// their recorded tools are in Registry, their pass-through tools are
	// forwarded live. Empty without upstreams; never nil.
	Upstreams *upstream.Catalog

	logger *slog.Logger
}

// ApprovalRuleError is an approval rule (OUTBOX_APPROVAL) that can never
// match an effect's intents: Build refuses it, since the intents it was
// meant to hold would run unapproved.
type ApprovalRuleError struct {
	// Rule is the rule refused.
	Rule outbox.ApprovalRule
	// Err says why.
	Err error
}

// Error implements error.
func (e *ApprovalRuleError) Error() string { return "rule " + e.Rule.String() + ": " + e.Err.Error() }

// Unwrap returns the reason.
func (e *ApprovalRuleError) Unwrap() error { return e.Err }

// Build builds the effects config enables, possibly none, counting into m
// (nil: counters of the set's own, exported nowhere). With Sandbox and
// StartSandbox it first starts the sandbox's stand-in providers. A bad
// effects file is an effectfile.FileErrors; an approval rule that cannot
// match is an *ApprovalRuleError.
func Build(ctx context.Context, config *Config, m *metrics.Effects) (*Set, error) {
	cfg := config.withDefaults()
	if m == nil {
		m = metrics.NewEffects()
	}
	s := &Set{Metrics: m, Providers: cfg.Providers, Upstreams: &upstream.Catalog{}, logger: cfg.Logger}
	if cfg.Sandbox {
		if err := s.startSandbox(ctx, cfg); err != nil {
			s.Close()
			return nil, err
		}
	}
	enabled, err := providerEffects(cfg, s.Providers)
	if err != nil {
		s.Close()
		return nil, err
	}
	file, err := LoadFile(cfg, cfg.EffectsFile, false, func(effect string) {
		m.DeclaredRuleErrors.WithLabelValues(effect).Inc()
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	if file != nil {
		for _, e := range file.Effects {
			enabled = append(enabled, e)
		}
		if s.Upstreams, err = bindUpstreams(cfg, file, m); err != nil {
			s.Upstreams = &upstream.Catalog{}
			s.Close()
			return nil, err
		}
		for _, t := range s.Upstreams.Recorded {
			enabled = append(enabled, t)
		}
	}
	if s.Registry, err = effects.NewRegistry(enabled...); err != nil {
		s.Close()
		return nil, err
	}
	if err := checkApprovalRules(cfg.ApprovalRules, s.Registry); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startSandbox points the providers at the sandbox's stand-ins: started,
// with StartSandbox, or addresses no one listens on.
func (s *Set) startSandbox(ctx context.Context, cfg *Config) error {
	if !cfg.StartSandbox {
		// Validation never reaches a provider: addresses that no one
		// listens on stand in for the stand-ins.
		s.Providers = sandboxProviders("http://127.0.0.1:9", "127.0.0.1:9", "http://127.0.0.1:9",
			"http://127.0.0.1:9/dedupe/"+sandboxWebhookEndpoint, "whsec_c2FuZGJveA==")
		return nil
	}
	sb, err := StartSandbox(cfg.Logger)
	if err != nil {
		return err
	}
	s.Sandbox = sb
	// The noop effects record what they do in a fixture table of the
	// sandbox's, which the migrations do not create.
	if cfg.Pool != nil {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := noop.EnsureTable(ctx, cfg.Pool, cfg.Schema)
		cancel()
		if err != nil {
			return err
		}
	}
	s.Providers = SandboxProviders(sb)
	// Their addresses, for a person who wants to look (each HTTP stand-in
	// answers GET /_sandbox/stats and takes faults at POST
	// /_sandbox/faults).
	cfg.Logger.Info("sandbox providers started",
		slog.String("stripe_url", sb.Stripe.URL()),
		slog.String("smtp_addr", sb.SMTP.Addr()),
		slog.String("zendesk_url", sb.Zendesk.URL()),
		slog.String("webhook_url", sb.Webhooks.EndpointURL(sandboxWebhookEndpoint, true)))
	return nil
}

// Passthrough returns the upstreams' pass-through tools, for the MCP
// servers.
func (s *Set) Passthrough() []mcpserver.PassthroughTool {
	out := make([]mcpserver.PassthroughTool, 0, len(s.Upstreams.Passthrough))
	for _, p := range s.Upstreams.Passthrough {
		out = append(out, p)
	}
	return out
}

// Close stops what Build started: the upstreams' children and sessions,
// then the sandbox's stand-ins. Call it after the dispatcher stopped, its
// attempts may be calling them.
func (s *Set) Close() {
	if s.Upstreams != nil {
		s.Upstreams.Close()
	}
	if s.Sandbox != nil {
		s.Sandbox.Close()
	}
}

// BuiltinNames are the names and the MCP tools a declared effect may not
// take: the built-in effects', the sandbox's, and outbox's own tools.
func BuiltinNames() (effectNames, toolNames []string) {
	effectNames = []string{charge.Name, email.Name, ticket.Name, webhook.Name}
	for _, sb := range sandboxEffects {
		effectNames = append(effectNames, sb.name)
	}
	for _, t := range mcpserver.EffectTools() {
		toolNames = append(toolNames, t.Name)
	}
	return effectNames, append(toolNames, mcpserver.ReadToolNames()...)
}

// LoadFile loads the declared effects and upstreams of path (nil when path
// is empty) with config's rules; noEnv skips reading {env.*} (outboxd
// effects check --no-env). onRuleError, if not nil, is told of an outcome
// rule that failed to evaluate.
func LoadFile(config *Config, path string, noEnv bool, onRuleError func(effect string)) (*upstream.File, error) {
	if path == "" {
		return nil, nil
	}
	cfg := config.withDefaults()
	reserved, reservedTools := BuiltinNames()
	return upstream.LoadFile(path, &declared.Config{
		EffectTimeout:   cfg.EffectTimeout,
		LookupEnvFunc:   cfg.LookupEnvFunc,
		LoopbackOnly:    cfg.Sandbox || cfg.LoopbackOnly,
		NoEnv:           noEnv,
		OnRuleErrorFunc: onRuleError,
		Reserved:        reserved,
		ReservedTools:   reservedTools,
		Retention:       cfg.Retention,
	})
}

// LockPath is the upstreams' lock of effectsFile: lock
// (OUTBOX_EFFECTS_LOCK) when set, else the file's path plus .lock.
func LockPath(lock, effectsFile string) string {
	if lock != "" {
		return lock
	}
	return upstream.LockPath(effectsFile)
}

// TakenNames are the names no mirrored tool may take, each with what took
// it: the built-in effects, their tools and outbox's read tools.
func TakenNames() map[string]string {
	names, tools := BuiltinNames()
	taken := map[string]string{}
	for _, n := range names {
		taken[n] = "the built-in effect " + n
	}
	for _, t := range tools {
		taken[t] = "outbox's tool " + t
	}
	return taken
}

// bindUpstreams binds the file's MCP upstreams to their lock. A file with
// upstreams and no (matching) lock refuses start, naming the command.
func bindUpstreams(cfg *Config, file *upstream.File, m *metrics.Effects) (*upstream.Catalog, error) {
	if len(file.Upstreams) == 0 {
		return &upstream.Catalog{}, nil
	}
	lockPath := LockPath(cfg.EffectsLock, cfg.EffectsFile)
	lock, err := upstream.ReadLock(lockPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	catalog, err := upstream.Bind(file, lock, &upstream.BindConfig{
		EffectsPath:      cfg.EffectsFile,
		LockPath:         lockPath,
		Logger:           cfg.Logger.With(slog.String("component", "upstreams")),
		ObserveCallFunc:  func(u, t, o string) { m.UpstreamCalls.WithLabelValues(u, t, o).Inc() },
		ObserveDriftFunc: func(u, t string) { m.UpstreamDrift.WithLabelValues(u, t).Inc() },
		Version:          cfg.Version,
	})
	if err != nil {
		return nil, err
	}
	for _, w := range catalog.Warnings {
		cfg.Logger.Warn("MCP upstream tool not mirrored", slog.String("warning", w))
	}
	return catalog, nil
}

// checkApprovalRules refuses an approval rule on a declared effect (or an
// upstream tool) that names an argument its schema does not have at the
// top level, or compares a non-numeric one with < or >: such a rule would
// never match, and the intents it was meant to hold would run unapproved.
func checkApprovalRules(rules []outbox.ApprovalRule, registry *effects.Registry) error {
	for _, r := range rules {
		e, ok := registry.Get(r.Effect)
		if !ok {
			continue
		}
		// Declared effects and recorded MCP upstream tools have schemas
		// from the file or the lock; the built-ins check their own.
		d, ok := e.(effects.ApprovalRuleChecker)
		if !ok {
			continue
		}
		numeric := r.Op == ">" || r.Op == ">=" || r.Op == "<" || r.Op == "<="
		if err := d.CheckApprovalRule(r.Arg, numeric); err != nil {
			return &ApprovalRuleError{Rule: r, Err: err}
		}
	}
	return nil
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/fixture/noop"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/sandbox"

	"github.com/outbox-dev/outbox/internal/upstream"
)

// sandboxEffects are the noop effects OUTBOX_SANDBOX=true enables, one per
// guarantee, recording what they do in the database.
var sandboxEffects = []struct {
	name      string
	guarantee effects.Guarantee
}{
	{noop.NameDefault, effects.GuaranteeDeduplicated},
	{"noop_reconcilable", effects.GuaranteeReconcilable},
	{"noop_at_most_once", effects.GuaranteeAtMostOnce},
}

// The sandbox's fixed settings: credentials its stand-ins accept, and the
// webhook endpoint it configures.
const (
	sandboxStripeKey       = "sk_test_outbox_sandbox"
	sandboxSMTPFrom        = "Outbox Sandbox <sandbox@outbox.invalid>"
	sandboxZendeskEmail    = "sandbox@outbox.invalid"
	sandboxZendeskToken    = "outbox-sandbox"
	sandboxWebhookEndpoint = "sandbox"
)

// ignoredProviderVars are the provider variables set, which
// OUTBOX_SANDBOX=true ignores.
func ignoredProviderVars(cfg *Config) []string {
	values := map[string]string{
		"SMTPAddr": cfg.SMTPAddr, "SMTPFrom": cfg.SMTPFrom, "SMTPPassword": cfg.SMTPPassword,
		"SMTPUser": cfg.SMTPUser, "StripeKey": cfg.StripeKey, "WebhookSecret": cfg.WebhookSecret,
		"Webhooks": cfg.Webhooks, "ZendeskEmail": cfg.ZendeskEmail, "ZendeskToken": cfg.ZendeskToken,
		"ZendeskURL": cfg.ZendeskURL,
	}
	var set []string
	for field, v := range values {
		if v != "" {
			set = append(set, envName(field))
		}
	}
	slices.Sort(set)
	return set
}

// providerSettings are where the provider effects send, and with what.
type providerSettings struct {
	smtpAddr, smtpFrom, smtpPassword, smtpUser string
	smtpTLS                                    email.TLSMode
	stripeKey, stripeURL                       string
	webhookSecret                              string
	webhooks                                   []webhook.Endpoint
	zendeskEmail, zendeskToken, zendeskURL     string
}

// newEffectRegistry returns the effects cfg enables, possibly none, for
// validating intents (enqueue, MCP): with OUTBOX_SANDBOX=true the provider
// effects are built as serve would build them, but no stand-in is started,
// since nothing is sent. pool is where the noop effects record what they do.
func newEffectRegistry(cfg *Config, pool *pgxpool.Pool, logger *slog.Logger) (*effects.Registry, error) {
	settings := configuredProviders(cfg)
	if cfg.Sandbox {
		// Validation never reaches a provider: addresses that no one
		// listens on stand in for the stand-ins.
		settings = sandboxSettings("http://127.0.0.1:9", "127.0.0.1:9", "http://127.0.0.1:9",
			"http://127.0.0.1:9/dedupe/"+sandboxWebhookEndpoint, "whsec_c2FuZGJveA==")
	}
	return buildRegistry(cfg, pool, logger, settings)
}

// startEffectRegistry returns the effects cfg enables, possibly none, for
// executing intents (serve). With OUTBOX_SANDBOX=true it first starts the
// sandbox's stand-in providers on loopback ports and points the effects at
// them; stop stops them, after the dispatcher stopped.
func startEffectRegistry(cfg *Config, pool *pgxpool.Pool, logger *slog.Logger) (registry *effects.Registry, stop func(), err error) {
	settings := configuredProviders(cfg)
	stop = func() {}
	if cfg.Sandbox {
		if ignored := ignoredProviderVars(cfg); len(ignored) > 0 {
			logger.Warn("OUTBOX_SANDBOX=true: provider settings ignored, every effect uses the sandbox", slog.String("ignored", strings.Join(ignored, ",")))
		}
		sb, err := startSandbox(logger)
		if err != nil {
			return nil, nil, err
		}
		stop = sb.Close
		// The noop effects record what they do in a fixture table of the
		// sandbox's, which the migrations do not create.
		if pool != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := noop.EnsureTable(ctx, pool, cfg.Schema)
			cancel()
			if err != nil {
				sb.Close()
				return nil, nil, err
			}
		}
		settings = sandboxSettings(sb.Stripe.URL(), sb.SMTP.Addr(), sb.Zendesk.URL(),
			sb.Webhooks.EndpointURL(sandboxWebhookEndpoint, true), sb.Webhooks.Secret())
		// Their addresses, for a person who wants to look (each HTTP
		// stand-in answers GET /_sandbox/stats and takes faults at POST
		// /_sandbox/faults).
		logger.Info("sandbox providers started",
			slog.String("stripe_url", sb.Stripe.URL()),
			slog.String("smtp_addr", sb.SMTP.Addr()),
			slog.String("zendesk_url", sb.Zendesk.URL()),
			slog.String("webhook_url", sb.Webhooks.EndpointURL(sandboxWebhookEndpoint, true)))
	}
	registry, err = buildRegistry(cfg, pool, logger, settings)
	if err != nil {
		stop()
		return nil, nil, err
	}
	logProviders(logger, registry, settings)
	return registry, stop, nil
}

// startSandbox starts the sandbox's stand-in providers, with the
// credentials the sandbox effects are configured with.
func startSandbox(logger *slog.Logger) (*sandbox.Sandbox, error) {
	sb, err := sandbox.Start(&sandbox.Config{
		Logger:       logger.With(slog.String("component", "sandbox")),
		StripeAPIKey: sandboxStripeKey,
		ZendeskEmail: sandboxZendeskEmail,
		ZendeskToken: sandboxZendeskToken,
	})
	if err != nil {
		return nil, fmt.Errorf("error starting the sandbox providers: %w", err)
	}
	return sb, nil
}

// configuredProviders reads the provider variables.
func configuredProviders(cfg *Config) *providerSettings {
	s := &providerSettings{
		smtpAddr:      cfg.SMTPAddr,
		smtpFrom:      cfg.SMTPFrom,
		smtpPassword:  cfg.SMTPPassword,
		smtpTLS:       email.TLSMode(cfg.SMTPTLS),
		smtpUser:      cfg.SMTPUser,
		stripeKey:     cfg.StripeKey,
		stripeURL:     cfg.StripeURL,
		webhookSecret: cfg.WebhookSecret,
		zendeskEmail:  cfg.ZendeskEmail,
		zendeskToken:  cfg.ZendeskToken,
		zendeskURL:    cfg.ZendeskURL,
	}
	s.webhooks = cfg.webhooks
	return s
}

func sandboxSettings(stripeURL, smtpAddr, zendeskURL, webhookURL, webhookSecret string) *providerSettings {
	return &providerSettings{
		smtpAddr:      smtpAddr,
		smtpFrom:      sandboxSMTPFrom,
		smtpTLS:       email.TLSNone,
		stripeKey:     sandboxStripeKey,
		stripeURL:     stripeURL,
		webhookSecret: webhookSecret,
		webhooks:      []webhook.Endpoint{{Name: sandboxWebhookEndpoint, URL: webhookURL, Dedupe: true}},
		zendeskEmail:  sandboxZendeskEmail,
		zendeskToken:  sandboxZendeskToken,
		zendeskURL:    zendeskURL,
	}
}

// buildRegistry builds the effects: each provider effect whose provider is
// configured (README, "Operations"), and the noop effects in sandbox mode.
func buildRegistry(cfg *Config, pool *pgxpool.Pool, logger *slog.Logger, s *providerSettings) (*effects.Registry, error) {
	var enabled []effects.Effect
	if s.stripeKey != "" {
		e, err := charge.New(&charge.Config{
			APIKey: s.stripeKey,
			Logger: logger,
			URL:    s.stripeURL,
		})
		if err != nil {
			return nil, err
		}
		enabled = append(enabled, e)
	}
	if s.smtpAddr != "" {
		e, err := email.New(&email.Config{
			Addr:     s.smtpAddr,
			From:     s.smtpFrom,
			Password: s.smtpPassword,
			TLS:      s.smtpTLS,
			User:     s.smtpUser,
		})
		if err != nil {
			return nil, err
		}
		enabled = append(enabled, e)
	}
	if s.zendeskURL != "" {
		e, err := ticket.New(&ticket.Config{
			Email: s.zendeskEmail,
			Token: s.zendeskToken,
			URL:   s.zendeskURL,
		})
		if err != nil {
			return nil, err
		}
		enabled = append(enabled, e)
	}
	if len(s.webhooks) > 0 {
		e, err := webhook.New(&webhook.Config{
			Endpoints: s.webhooks,
			Secret:    s.webhookSecret,
		})
		if err != nil {
			return nil, err
		}
		enabled = append(enabled, e)
	}
	if cfg.Sandbox {
		for _, sb := range sandboxEffects {
			effect, err := noop.New(&noop.Config{
				Guarantee: sb.guarantee,
				Logger:    logger,
				Name:      sb.name,
				Pool:      pool,
				Schema:    cfg.Schema,
			})
			if err != nil {
				return nil, err
			}
			enabled = append(enabled, effect)
		}
	}
	file, err := loadDeclaredFile(cfg, cfg.EffectsFile, false, func(effect string) {
		declaredRuleErrors.WithLabelValues(effect).Inc()
	})
	if err != nil {
		return nil, err
	}
	if file != nil {
		for _, e := range file.Effects {
			enabled = append(enabled, e)
		}
		catalog, err := bindUpstreams(cfg, file, logger)
		if err != nil {
			return nil, err
		}
		for _, t := range catalog.Recorded {
			enabled = append(enabled, t)
		}
		if cfg.upstreams != nil {
			cfg.upstreams.Close()
		}
		cfg.upstreams = catalog
	}
	registry, err := effects.NewRegistry(enabled...)
	if err != nil {
		return nil, err
	}
	if err := checkDeclaredApprovalRules(cfg, registry); err != nil {
		return nil, err
	}
	return registry, nil
}

// checkDeclaredApprovalRules refuses an OUTBOX_APPROVAL rule on a declared
// effect that names an argument its schema does not have at the top level,
// or compares a non-numeric one with < or >: such a rule would never match,
// and the charges it was meant to hold would run unapproved.
func checkDeclaredApprovalRules(cfg *Config, registry *effects.Registry) error {
	for _, r := range cfg.ApprovalRules() {
		e, ok := registry.Get(r.Effect)
		if !ok {
			continue
		}
		// Declared effects and recorded MCP upstream tools have schemas
		// from the file or the lock; the built-ins check their own.
		d, ok := e.(interface {
			CheckApprovalRule(arg string, numeric bool) error
		})
		if !ok {
			continue
		}
		numeric := r.Op == ">" || r.Op == ">=" || r.Op == "<" || r.Op == "<="
		if err := d.CheckApprovalRule(r.Arg, numeric); err != nil {
			return &ConfigError{Var: envName("Approval"), Message: "rule " + r.String() + ": " + err.Error()}
		}
	}
	return nil
}

// declaredRuleErrors is outbox_declared_rule_errors_total: outcome rules of
// declared effects whose evaluation failed (and so did not match). One for
// the process, which serve registers on its /metrics.
var declaredRuleErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "outbox_declared_rule_errors_total",
	Help: "Outcome rules of declared effects (OUTBOX_EFFECTS_FILE) whose CEL evaluation failed, and so did not match.",
}, []string{"effect"})

// builtinNames are the names and MCP tools a declared effect may not take.
func builtinNames() (effectNames, toolNames []string) {
	effectNames = []string{charge.Name, email.Name, ticket.Name, webhook.Name}
	for _, sb := range sandboxEffects {
		effectNames = append(effectNames, sb.name)
	}
	for _, t := range mcpserver.EffectTools() {
		toolNames = append(toolNames, t.Name)
	}
	return effectNames, append(toolNames, mcpserver.ReadToolNames()...)
}

// upstreamCalls is outbox_upstream_calls_total, and upstreamDrift
// outbox_upstream_drift_total: one for the process, which serve registers
// on its /metrics.
var (
	upstreamCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_upstream_calls_total",
		Help: "Calls of MCP upstream tools (OUTBOX_EFFECTS_FILE upstreams), recorded and pass-through, by outcome.",
	}, []string{"upstream", "tool", "outcome"})
	upstreamDrift = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_upstream_drift_total",
		Help: "MCP upstream tools found to differ from their pin (or missing), and so withdrawn until pinned again.",
	}, []string{"upstream", "tool"})
)

// effectsLockPath is the upstreams' lock: OUTBOX_EFFECTS_LOCK, or the
// effects file's path plus .lock.
func effectsLockPath(cfg *Config, file string) string {
	if cfg.EffectsLock != "" {
		return cfg.EffectsLock
	}
	return upstream.LockPath(file)
}

// bindUpstreams binds the file's MCP upstreams to their lock. A file with
// upstreams and no (matching) lock refuses start, naming the command.
func bindUpstreams(cfg *Config, file *upstream.File, logger *slog.Logger) (*upstream.Catalog, error) {
	if len(file.Upstreams) == 0 {
		return &upstream.Catalog{}, nil
	}
	lockPath := effectsLockPath(cfg, cfg.EffectsFile)
	lock, err := upstream.ReadLock(lockPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	catalog, err := upstream.Bind(file, lock, &upstream.BindConfig{
		EffectsPath:      cfg.EffectsFile,
		LockPath:         lockPath,
		Logger:           logger.With(slog.String("component", "upstreams")),
		ObserveCallFunc:  func(u, t, o string) { upstreamCalls.WithLabelValues(u, t, o).Inc() },
		ObserveDriftFunc: func(u, t string) { upstreamDrift.WithLabelValues(u, t).Inc() },
		Version:          version(),
	})
	if err != nil {
		return nil, err
	}
	for _, w := range catalog.Warnings {
		logger.Warn("MCP upstream tool not mirrored", slog.String("warning", w))
	}
	return catalog, nil
}

// passthroughTools are the upstreams' pass-through tools, for the MCP
// servers.
func passthroughTools(cfg *Config) []mcpserver.PassthroughTool {
	if cfg.upstreams == nil {
		return nil
	}
	out := make([]mcpserver.PassthroughTool, 0, len(cfg.upstreams.Passthrough))
	for _, p := range cfg.upstreams.Passthrough {
		out = append(out, p)
	}
	return out
}

// loadDeclaredFile loads the declared effects and upstreams of file (nil
// when file is empty), with loadDeclared's rules.
func loadDeclaredFile(cfg *Config, file string, noEnv bool, onRuleError func(string)) (*upstream.File, error) {
	if file == "" {
		return nil, nil
	}
	reserved, reservedTools := builtinNames()
	lookupEnv := func(name string) (string, bool) { return os.LookupEnv(name) }
	if cfg.lookuper != nil {
		lookupEnv = cfg.lookuper.Lookup
	}
	return upstream.LoadFile(file, &declared.Config{
		EffectTimeout: cfg.EffectTimeout,
		LookupEnv:     lookupEnv,
		LoopbackOnly:  cfg.Sandbox || cfg.loopbackEffects,
		NoEnv:         noEnv,
		OnRuleError:   onRuleError,
		Reserved:      reserved,
		ReservedTools: reservedTools,
		Retention:     cfg.Retention,
	})
}

// logProviders says where each provider effect sends, never with a secret:
// URLs lose their user information, webhook endpoints are named, not shown
// (their URLs can carry tokens).
func logProviders(logger *slog.Logger, registry *effects.Registry, s *providerSettings) {
	if _, ok := registry.Get(charge.Name); ok {
		logger.Info("provider configured", slog.String("effect", charge.Name), slog.String("url", redactURL(s.stripeURL)))
	}
	if _, ok := registry.Get(email.Name); ok {
		attrs := []any{slog.String("effect", email.Name), slog.String("addr", s.smtpAddr), slog.String("tls", string(s.smtpTLS)), slog.Bool("auth", s.smtpUser != "")}
		logger.Info("provider configured", attrs...)
	}
	if _, ok := registry.Get(ticket.Name); ok {
		logger.Info("provider configured", slog.String("effect", ticket.Name), slog.String("url", redactURL(s.zendeskURL)))
	}
	for _, name := range registry.Names() {
		if e, ok := registry.Get(name); ok {
			if d, ok := e.(*declared.Effect); ok {
				// The URL's template, never the URL: its query may hold a
				// secret.
				logger.Info("provider configured", slog.String("effect", name), slog.String("declared", "OUTBOX_EFFECTS_FILE"),
					slog.String("guarantee", string(d.Guarantee())), slog.String("url", d.URLTemplate()))
			}
		}
	}
	if e, ok := registry.Get(webhook.Name); ok {
		var names []string
		for _, ep := range e.(*webhook.Effect).Endpoints() {
			if ep.Dedupe {
				names = append(names, ep.Name+" (dedupe)")
			} else {
				names = append(names, ep.Name)
			}
		}
		logger.Info("provider configured", slog.String("effect", webhook.Name), slog.String("endpoints", strings.Join(names, ", ")))
	}
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}

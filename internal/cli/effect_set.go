package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/internal/effectset"
	"github.com/outbox-dev/outbox/internal/metrics"
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

// effectSetConfig is what effectset.Build reads of cfg; pool is where the
// sandbox's noop effects record what they do.
func effectSetConfig(cfg *Config, pool *pgxpool.Pool, logger *slog.Logger) *effectset.Config {
	lookupEnv := func(name string) (string, bool) { return os.LookupEnv(name) }
	if cfg.lookuper != nil {
		lookupEnv = cfg.lookuper.Lookup
	}
	return &effectset.Config{
		ApprovalRules: cfg.ApprovalRules(),
		EffectTimeout: cfg.EffectTimeout,
		EffectsFile:   cfg.EffectsFile,
		EffectsLock:   cfg.EffectsLock,
		Logger:        logger,
		LookupEnvFunc: lookupEnv,
		Pool:          pool,
		Providers: effectset.Providers{
			SMTPAddr:      cfg.SMTPAddr,
			SMTPFrom:      cfg.SMTPFrom,
			SMTPPassword:  cfg.SMTPPassword,
			SMTPTLS:       email.TLSMode(cfg.SMTPTLS),
			SMTPUser:      cfg.SMTPUser,
			StripeKey:     cfg.StripeKey,
			StripeURL:     cfg.StripeURL,
			WebhookSecret: cfg.WebhookSecret,
			Webhooks:      cfg.webhooks,
			ZendeskEmail:  cfg.ZendeskEmail,
			ZendeskToken:  cfg.ZendeskToken,
			ZendeskURL:    cfg.ZendeskURL,
		},
		Retention: cfg.Retention,
		Sandbox:   cfg.Sandbox,
		Schema:    cfg.Schema,
		Version:   version(),
	}
}

// newEffectSet builds the effects cfg enables, possibly none, for
// validating intents (enqueue, mcp, effects list): with OUTBOX_SANDBOX=true
// the provider effects are built as serve would build them, but no
// stand-in is started, since nothing is sent. The caller closes the set.
func newEffectSet(ctx context.Context, cfg *Config, pool *pgxpool.Pool, logger *slog.Logger) (*effectset.Set, error) {
	return buildEffectSet(ctx, effectSetConfig(cfg, pool, logger), nil)
}

// startEffectSet builds the effects cfg enables, possibly none, for
// executing intents (serve), counting into m. With OUTBOX_SANDBOX=true it
// first starts the sandbox's stand-in providers on loopback ports and
// points the effects at them. The caller closes the set after the
// dispatcher stopped.
func startEffectSet(ctx context.Context, cfg *Config, pool *pgxpool.Pool, logger *slog.Logger, m *metrics.Effects) (*effectset.Set, error) {
	if cfg.Sandbox {
		if ignored := ignoredProviderVars(cfg); len(ignored) > 0 {
			logger.Warn("OUTBOX_SANDBOX=true: provider settings ignored, every effect uses the sandbox", slog.String("ignored", strings.Join(ignored, ",")))
		}
	}
	ecfg := effectSetConfig(cfg, pool, logger)
	ecfg.StartSandbox = true
	set, err := buildEffectSet(ctx, ecfg, m)
	if err != nil {
		return nil, err
	}
	set.LogProviders()
	return set, nil
}

// buildEffectSet is effectset.Build, an approval rule that can never match
// reported as the configuration error it is.
func buildEffectSet(ctx context.Context, ecfg *effectset.Config, m *metrics.Effects) (*effectset.Set, error) {
	set, err := effectset.Build(ctx, ecfg, m)
	var ruleErr *effectset.ApprovalRuleError
	if errors.As(err, &ruleErr) {
		return nil, &ConfigError{Var: envName("Approval"), Message: ruleErr.Error()}
	}
	return set, err
}

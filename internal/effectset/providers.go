package effectset

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
)

// Providers are where the built-in provider effects send, and with what
// (README, "Operations"). A provider is enabled when its address is set.
type Providers struct {
	// SMTPAddr enables email: the SMTP server's host:port.
	SMTPAddr string
	// SMTPFrom is email's From.
	SMTPFrom string
	// SMTPPassword is the SMTP password.
	SMTPPassword string
	// SMTPTLS is how email secures its connection.
	SMTPTLS email.TLSMode
	// SMTPUser is the SMTP user; empty sends without authentication.
	SMTPUser string
	// StripeKey enables charge: Stripe's secret key.
	StripeKey string
	// StripeURL is Stripe's API.
	StripeURL string
	// WebhookSecret signs webhooks (Standard Webhooks).
	WebhookSecret string
	// Webhooks enable webhook: its endpoints.
	Webhooks []webhook.Endpoint
	// ZendeskEmail is the Zendesk agent's address.
	ZendeskEmail string
	// ZendeskToken is the Zendesk API token.
	ZendeskToken string
	// ZendeskURL enables ticket: the Zendesk account.
	ZendeskURL string
}

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
	// SandboxStripeKey is the Stripe key the sandbox's stand-in accepts.
	SandboxStripeKey       = "sk_test_outbox_sandbox"
	sandboxSMTPFrom        = "Outbox Sandbox <sandbox@outbox.invalid>"
	sandboxZendeskEmail    = "sandbox@outbox.invalid"
	sandboxZendeskToken    = "outbox-sandbox"
	sandboxWebhookEndpoint = "sandbox"
)

// StartSandbox starts the sandbox's stand-in providers, with the
// credentials SandboxProviders configures the effects with.
func StartSandbox(logger *slog.Logger) (*sandbox.Sandbox, error) {
	sb, err := sandbox.Start(&sandbox.Config{
		Logger:       logger.With(slog.String("component", "sandbox")),
		StripeAPIKey: SandboxStripeKey,
		ZendeskEmail: sandboxZendeskEmail,
		ZendeskToken: sandboxZendeskToken,
	})
	if err != nil {
		return nil, fmt.Errorf("error starting the sandbox providers: %w", err)
	}
	return sb, nil
}

// SandboxProviders are the provider settings that send to sb's stand-ins.
func SandboxProviders(sb *sandbox.Sandbox) Providers {
	return sandboxProviders(sb.Stripe.URL(), sb.SMTP.Addr(), sb.Zendesk.URL(),
		sb.Webhooks.EndpointURL(sandboxWebhookEndpoint, true), sb.Webhooks.Secret())
}

func sandboxProviders(stripeURL, smtpAddr, zendeskURL, webhookURL, webhookSecret string) Providers {
	return Providers{
		SMTPAddr:      smtpAddr,
		SMTPFrom:      sandboxSMTPFrom,
		SMTPTLS:       email.TLSNone,
		StripeKey:     SandboxStripeKey,
		StripeURL:     stripeURL,
		WebhookSecret: webhookSecret,
		Webhooks:      []webhook.Endpoint{{Name: sandboxWebhookEndpoint, URL: webhookURL, Dedupe: true}},
		ZendeskEmail:  sandboxZendeskEmail,
		ZendeskToken:  sandboxZendeskToken,
		ZendeskURL:    zendeskURL,
	}
}

// providerEffects builds each provider effect whose provider is
// configured, and the noop effects in sandbox mode.
func providerEffects(cfg *Config, p Providers) ([]effects.Effect, error) {
	var enabled []effects.Effect
	if p.StripeKey != "" {
		e, err := charge.New(&charge.Config{
			APIKey: p.StripeKey,
			Logger: cfg.Logger,
			URL:    p.StripeURL,
		})
		if err != nil {
			return nil, err
		}
		enabled = append(enabled, e)
	}
	if p.SMTPAddr != "" {
		e, err := email.New(&email.Config{
			Addr:     p.SMTPAddr,
			From:     p.SMTPFrom,
			Password: p.SMTPPassword,
			TLS:      p.SMTPTLS,
			User:     p.SMTPUser,
		})
		if err != nil {
			return nil, err
		}
		enabled = append(enabled, e)
	}
	if p.ZendeskURL != "" {
		e, err := ticket.New(&ticket.Config{
			Email: p.ZendeskEmail,
			Token: p.ZendeskToken,
			URL:   p.ZendeskURL,
		})
		if err != nil {
			return nil, err
		}
		enabled = append(enabled, e)
	}
	if len(p.Webhooks) > 0 {
		e, err := webhook.New(&webhook.Config{
			Endpoints: p.Webhooks,
			Secret:    p.WebhookSecret,
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
				Logger:    cfg.Logger,
				Name:      sb.name,
				Pool:      cfg.Pool,
				Schema:    cfg.Schema,
			})
			if err != nil {
				return nil, err
			}
			enabled = append(enabled, effect)
		}
	}
	return enabled, nil
}

// LogProviders says where each provider effect sends, never with a
// secret: URLs lose their user information, webhook endpoints are named,
// not shown (their URLs can carry tokens).
func (s *Set) LogProviders() {
	logger, registry, p := s.logger, s.Registry, s.Providers
	if _, ok := registry.Get(charge.Name); ok {
		logger.Info("provider configured", slog.String("effect", charge.Name), slog.String("url", redactURL(p.StripeURL)))
	}
	if _, ok := registry.Get(email.Name); ok {
		attrs := []any{slog.String("effect", email.Name), slog.String("addr", p.SMTPAddr), slog.String("tls", string(p.SMTPTLS)), slog.Bool("auth", p.SMTPUser != "")}
		logger.Info("provider configured", attrs...)
	}
	if _, ok := registry.Get(ticket.Name); ok {
		logger.Info("provider configured", slog.String("effect", ticket.Name), slog.String("url", redactURL(p.ZendeskURL)))
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

// redactURL is s without its user information and query.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}

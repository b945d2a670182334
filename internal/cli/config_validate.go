package cli

import (
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/sethvargo/go-envconfig"

	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/outbox"
)

// schemaRE is what OUTBOX_SCHEMA must match: a name that needs no quoting
// and leaves room in Postgres's 63-byte identifiers for the NOTIFY channels
// derived from it.
var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// validate checks what go-envconfig's decoding does not: ranges, enums and
// formats.
func (c *Config) validate(lookuper envconfig.Lookuper) error {
	var dbErr, sessionErr, levelErr, rateErr error
	c.poolConfig, c.sessionPoolConfig = nil, nil
	if c.DatabaseURL != "" {
		c.poolConfig, dbErr = parseDatabaseURL(c.DatabaseURL)
	}
	if c.SessionDatabaseURL != "" {
		c.sessionPoolConfig, sessionErr = parseDatabaseURL(c.SessionDatabaseURL)
	}
	c.logLevel, levelErr = parseLevel(c.LogLevel)
	c.rateLimit, rateErr = ParseRateLimit(c.RateLimit)
	checks := []struct {
		field string
		ok    bool
	}{
		{"ApprovalTTL", c.ApprovalTTL > 0},
		{"AutoKeyWindow", c.AutoKeyWindow > 0},
		{"DatabaseURL", dbErr == nil},
		{"EffectTimeout", c.EffectTimeout > 0},
		{"EffectsFile", c.EffectsFile == "" || readableFile(c.EffectsFile)},
		// A lock means nothing without the file whose upstreams it pins.
		{"EffectsLock", c.EffectsLock == "" || (c.EffectsFile != "" && strings.HasSuffix(c.EffectsLock, ".lock"))},
		{"FetchPollInterval", c.FetchPollInterval > 0},
		{"HeartbeatInterval", c.HeartbeatInterval > 0},
		{"LockTimeout", c.LockTimeout >= 0},
		{"StatementTimeout", c.StatementTimeout >= 0},
		{"HTTPAddr", validAddr(c.HTTPAddr)},
		{"AdminAddr", c.AdminAddr == "" || validAddr(c.AdminAddr)},
		{"TLSCertFile", c.TLSCertFile == "" || readableFile(c.TLSCertFile)},
		{"TLSKeyFile", c.TLSKeyFile == "" || readableFile(c.TLSKeyFile)},
		{"LogFormat", c.LogFormat == "text" || c.LogFormat == "json"},
		{"MaxWaits", c.MaxWaits >= 1 && c.MaxWaits <= 100000},
		{"ModelKeyGuard", slices.Contains([]keyguard.Mode{keyguard.ModeRefuse, keyguard.ModeReplay, keyguard.ModeOff}, keyguard.Mode(c.ModelKeyGuard))},
		{"LogLevel", levelErr == nil},
		{"MaxAttempts", c.MaxAttempts >= 1},
		{"Namespace", outbox.ValidateNamespace(c.Namespace) == nil},
		{"PublicURL", c.PublicURL == "" || validHTTPURL(c.PublicURL)},
		{"RateLimit", rateErr == nil},
		{"ReconcileInterval", c.ReconcileInterval > 0},
		{"Retention", c.Retention > 0},
		{"Schema", schemaRE.MatchString(c.Schema)},
		{"SessionDatabaseURL", sessionErr == nil},
		{"SMTPAddr", c.SMTPAddr == "" || validHostPort(c.SMTPAddr)},
		{"SMTPFrom", c.SMTPFrom == "" || validEmail(c.SMTPFrom)},
		{"SMTPTLS", c.SMTPTLS == "starttls" || c.SMTPTLS == "tls" || c.SMTPTLS == "none"},
		{"StateKey", c.StateKey == "" || c.StateKeyValue() != nil},
		{"StripeURL", validHTTPURL(c.StripeURL)},
		{"WebhookSecret", c.WebhookSecret == "" || validWebhookSecret(c.WebhookSecret)},
		{"Workers", c.Workers >= 1 && c.Workers <= workersMax},
		{"ZendeskURL", c.ZendeskURL == "" || validHTTPURL(c.ZendeskURL)},
	}
	for _, check := range checks {
		if !check.ok {
			return invalid(lookuper, check.field)
		}
	}
	if err := c.validateWebhooks(); err != nil {
		return err
	}
	if err := c.validateApproval(); err != nil {
		return err
	}
	if err := c.loadTokens(); err != nil {
		return err
	}
	// A provider is enabled by one variable, and then needs its others.
	requires := []struct {
		field, needs string
		ok           bool
	}{
		{"SMTPFrom", "SMTPAddr", c.SMTPAddr == "" || c.SMTPFrom != ""},
		{"TLSKeyFile", "TLSCertFile", c.TLSCertFile == "" || c.TLSKeyFile != ""},
		{"TLSCertFile", "TLSKeyFile", c.TLSKeyFile == "" || c.TLSCertFile != ""},
		{"WebhookSecret", "Webhooks", c.Webhooks == "" || c.WebhookSecret != ""},
		{"ZendeskEmail", "ZendeskURL", c.ZendeskURL == "" || c.ZendeskEmail != ""},
		{"ZendeskToken", "ZendeskURL", c.ZendeskURL == "" || c.ZendeskToken != ""},
	}
	for _, r := range requires {
		if !r.ok {
			return &ConfigError{Var: envName(r.field), Message: "not set; expected " + fieldTag(r.field, "expect") + ", required when " + envName(r.needs) + " is set"}
		}
	}
	return nil
}

// validateApproval checks OUTBOX_APPROVAL, naming the bad rule, and that
// OUTBOX_APPROVAL_WEBHOOK names a configured endpoint (the sandbox
// configures its own).
func (c *Config) validateApproval() error {
	rules, err := outbox.ParseApprovalRules(c.Approval)
	if err != nil {
		return &ConfigError{Var: envName("Approval"), Message: err.Error() + "; expected " + fieldTag("Approval", "expect")}
	}
	c.approvalRules = nil
	if c.Approval != "" {
		c.approvalRules = rules
	}
	if c.ApprovalWebhook == "" || c.Sandbox {
		return nil
	}
	for _, ep := range c.webhooks {
		if ep.Name == c.ApprovalWebhook {
			return nil
		}
	}
	return &ConfigError{Var: envName("ApprovalWebhook"), Message: fmt.Sprintf("expected %s, got %q", fieldTag("ApprovalWebhook", "expect"), c.ApprovalWebhook)}
}

// validateWebhooks checks and keeps OUTBOX_WEBHOOKS' endpoints, saying
// which entry is wrong without quoting it: its URL can carry a token.
func (c *Config) validateWebhooks() error {
	c.webhooks = nil
	if c.Webhooks == "" {
		return nil
	}
	eps, err := webhook.ParseEndpoints(c.Webhooks)
	if err != nil {
		return &ConfigError{Var: envName("Webhooks"), Message: "expected " + fieldTag("Webhooks", "expect") + "; " + err.Error()}
	}
	c.webhooks = eps
	return nil
}

// loadTokens parses OUTBOX_API_TOKENS and OUTBOX_API_TOKENS_FILE into
// c.tokens, naming the entry at fault and never the token.
func (c *Config) loadTokens() error {
	c.tokens = nil
	if c.APITokens != "" {
		tokens, err := access.ParseTokens(c.APITokens)
		if err != nil {
			return &ConfigError{Var: envName("APITokens"), Message: err.Error()}
		}
		c.tokens = tokens
	}
	if c.APITokensFile != "" {
		b, err := os.ReadFile(c.APITokensFile)
		if err != nil {
			return &ConfigError{Var: envName("APITokensFile"), Message: "cannot read the file: " + err.Error()}
		}
		tokens, err := access.ParseTokenFile(string(b))
		if err != nil {
			return &ConfigError{Var: envName("APITokensFile"), Message: err.Error()}
		}
		c.tokens = append(c.tokens, tokens...)
	}
	return nil
}

// readableFile reports whether path names a file this process can read.
func readableFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	info, err := f.Stat()
	return err == nil && info.Mode().IsRegular()
}

func validAddr(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port != ""
}

func validHostPort(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	return err == nil && host != "" && port != ""
}

func validEmail(s string) bool {
	_, err := mail.ParseAddress(s)
	return err == nil
}

func validHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func validWebhookSecret(s string) bool {
	_, err := webhook.ParseSecret(s)
	return err == nil
}

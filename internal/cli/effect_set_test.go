package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
)

func TestProviderConfig(t *testing.T) {
	t.Parallel()

	load := func(env map[string]string) (*Config, error) {
		return loadConfig(context.Background(), envconfig.MapLookuper(env))
	}

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(nil)
		require.NoError(t, err)
		require.Equal(t, "https://api.stripe.com", cfg.StripeURL)
		require.Equal(t, "starttls", cfg.SMTPTLS)
		set, err := newEffectSet(context.Background(), cfg, nil, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		defer set.Close()
		require.Empty(t, set.Registry.Names(), "no provider configured, no effect")
	})

	t.Run("BadValues", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			env        map[string]string
			variable   string
			notInError string
		}{
			{map[string]string{"OUTBOX_STRIPE_URL": "api.stripe.com"}, "OUTBOX_STRIPE_URL", ""},
			{map[string]string{"OUTBOX_SMTP_TLS": "ssl"}, "OUTBOX_SMTP_TLS", ""},
			{map[string]string{"OUTBOX_SMTP_ADDR": "smtp.example.com"}, "OUTBOX_SMTP_ADDR", ""},
			{map[string]string{"OUTBOX_SMTP_ADDR": "smtp.example.com:587"}, "OUTBOX_SMTP_FROM", ""},
			{map[string]string{"OUTBOX_SMTP_ADDR": "smtp.example.com:587", "OUTBOX_SMTP_FROM": "not an address"}, "OUTBOX_SMTP_FROM", ""},
			{map[string]string{"OUTBOX_ZENDESK_URL": "https://acme.zendesk.com"}, "OUTBOX_ZENDESK_EMAIL", ""},
			{map[string]string{"OUTBOX_ZENDESK_URL": "https://acme.zendesk.com", "OUTBOX_ZENDESK_EMAIL": "a@example.com"}, "OUTBOX_ZENDESK_TOKEN", ""},
			{map[string]string{"OUTBOX_ZENDESK_URL": "acme"}, "OUTBOX_ZENDESK_URL", ""},
			{map[string]string{"OUTBOX_WEBHOOKS": "orders=https://example.com/o?token=tok_SECRET"}, "OUTBOX_WEBHOOK_SECRET", ""},
			{map[string]string{"OUTBOX_WEBHOOKS": "orders=ftp://example.com/o?token=tok_SECRET", "OUTBOX_WEBHOOK_SECRET": "whsec_c2VjcmV0"}, "OUTBOX_WEBHOOKS", "tok_SECRET"},
			{map[string]string{"OUTBOX_WEBHOOK_SECRET": "sekrit_value"}, "OUTBOX_WEBHOOK_SECRET", "sekrit_value"},
		} {
			_, err := load(tc.env)
			require.Error(t, err, "env %v", tc.env)
			var cfgErr *ConfigError
			require.ErrorAs(t, err, &cfgErr)
			require.Equal(t, tc.variable, cfgErr.Var, "env %v: %v", tc.env, err)
			require.NotContains(t, err.Error(), "\n")
			if tc.notInError != "" {
				require.NotContains(t, err.Error(), tc.notInError)
			}
		}
	})

	t.Run("EnabledByTheirProvider", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(map[string]string{
			"OUTBOX_STRIPE_KEY":     "sk_test_SECRET_KEY",
			"OUTBOX_SMTP_ADDR":      "smtp.example.com:587",
			"OUTBOX_SMTP_FROM":      "Shop <shop@example.com>",
			"OUTBOX_SMTP_USER":      "shop",
			"OUTBOX_SMTP_PASSWORD":  "SECRET_SMTP_PASSWORD",
			"OUTBOX_ZENDESK_URL":    "https://acme.zendesk.com",
			"OUTBOX_ZENDESK_EMAIL":  "agent@example.com",
			"OUTBOX_ZENDESK_TOKEN":  "SECRET_ZENDESK_TOKEN",
			"OUTBOX_WEBHOOKS":       "orders=https://example.com/o?token=SECRET_TOKEN;dedupe,audit=https://example.com/a;dedupe",
			"OUTBOX_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			"OUTBOX_SMTP_TLS":       "tls",
		})
		require.NoError(t, err)
		var logs bytes.Buffer
		set, err := startEffectSet(context.Background(), cfg, nil, slog.New(slog.NewTextHandler(&logs, nil)), nil)
		require.NoError(t, err)
		defer set.Close()
		registry := set.Registry
		require.Equal(t, []string{"charge", "email", "ticket", "webhook"}, registry.Names())
		want := map[string]effects.Guarantee{
			"charge": effects.GuaranteeDeduplicated, "email": effects.GuaranteeAtMostOnce,
			"ticket": effects.GuaranteeReconcilable, "webhook": effects.GuaranteeDeduplicated,
		}
		for name, g := range want {
			e, _ := registry.Get(name)
			require.Equal(t, g, e.Guarantee(), name)
		}
		out := logs.String()
		require.Contains(t, out, "orders (dedupe)")
		require.Contains(t, out, "tls=tls")
		for _, secret := range []string{"SECRET_KEY", "SECRET_SMTP_PASSWORD", "SECRET_ZENDESK_TOKEN", "SECRET_TOKEN", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
			require.NotContains(t, out, secret)
		}
	})

	t.Run("SandboxStartsStandIns", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(map[string]string{"OUTBOX_SANDBOX": "true", "OUTBOX_STRIPE_KEY": "sk_live_SECRET"})
		require.NoError(t, err)
		var logs bytes.Buffer
		set, err := startEffectSet(context.Background(), cfg, nil, slog.New(slog.NewTextHandler(&logs, nil)), nil)
		require.NoError(t, err)
		defer set.Close()
		registry := set.Registry
		for _, name := range []string{"charge", "email", "ticket", "webhook", "noop"} {
			_, ok := registry.Get(name)
			require.True(t, ok, name)
		}
		out := logs.String()
		require.Contains(t, out, "sandbox providers started")
		require.Contains(t, out, "ignored=OUTBOX_STRIPE_KEY")
		require.NotContains(t, out, "sk_live_SECRET")
		require.True(t, strings.Contains(out, "stripe_url=http://127.0.0.1:"), out)

		// The validation-only registry has the same effects, with nothing
		// started.
		validatingSet, err := newEffectSet(context.Background(), cfg, nil, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		defer validatingSet.Close()
		require.Nil(t, validatingSet.Sandbox, "nothing started")
		validating := validatingSet.Registry
		require.Equal(t, registry.Names(), validating.Names())
		e, _ := validating.Get("webhook")
		require.NoError(t, e.ValidateArgs([]byte(`{"endpoint": "sandbox", "payload": {}}`)))
	})
}

package cli

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// TestEnvDefaults holds every env tag's default= to the constant of the
// package that takes the setting: a default is written in one place, and
// a tag that drifts from it fails here. A new setting with a default must
// be added to the table.
func TestEnvDefaults(t *testing.T) {
	t.Parallel()

	// The libraries' zero values for the switches outboxd spells as
	// variables, off unless set.
	const off = false
	want := map[string]any{
		"AllowNoAuth":        off,
		"ApprovalTTL":        workers.ApprovalTTLDefault,
		"AutoKeyWindow":      keyguard.WindowDefault,
		"AutoMigrate":        off,
		"BatchFirstAttempts": !dispatcher.Config{}.DisableBatchFirstAttempts,
		"EffectTimeout":      workers.EffectTimeoutDefault,
		"FetchPollInterval":  dispatcher.FetchPollIntervalDefault,
		"HeartbeatInterval":  dispatcher.HeartbeatIntervalDefault,
		"HTTPAddr":           HTTPAddrDefault,
		"LockTimeout":        dbutil.LockTimeoutDefault,
		"LogFormat":          LogFormatDefault,
		"LogLevel":           LogLevelDefault,
		"MaxAttempts":        workers.MaxAttemptsDefault,
		"MaxWaits":           httpapi.MaxWaitsDefault,
		"ModelKeyGuard":      string(keyguard.ModeDefault),
		"Namespace":          outbox.NamespaceDefault,
		"PollOnly":           dispatcher.Config{}.PollOnly,
		"ReconcileInterval":  workers.ReconcileIntervalDefault,
		"Retention":          workers.RetentionDefault,
		"Sandbox":            off,
		"Schema":             migrations.SchemaDefault,
		"SMTPTLS":            string(email.TLSDefault),
		"StatementTimeout":   dbutil.StatementTimeoutDefault,
		"StripeURL":          charge.URLDefault,
		"TraceSQL":           off,
		"Workers":            dispatcher.WorkersDefault,
	}
	// The defaults as go-envconfig decodes them from the tags.
	cfg, err := loadConfig(context.Background(), envconfig.MapLookuper(nil))
	require.NoError(t, err)
	got := reflect.ValueOf(cfg).Elem()
	typ := got.Type()
	seen := map[string]bool{}
	for i := range typ.NumField() {
		field := typ.Field(i).Name
		if envName(field) == "" || envDefault(field) == "" {
			continue
		}
		seen[field] = true
		w, ok := want[field]
		require.True(t, ok, "%s has default=%s: add its library constant to the table", envName(field), envDefault(field))
		require.EqualValues(t, w, got.Field(i).Interface(), "%s's default= differs from its constant", envName(field))
	}
	for field := range want {
		require.True(t, seen[field], "%s has no default= tag", field)
	}
}

// TestLoadConfigNamesEveryBadVariable sets each variable, one at a time, to a
// value no typed variable accepts, and requires any refusal to name that
// variable (and never to quote a secret). Variables that take free text may
// accept it; every typed one must refuse it.
func TestLoadConfigNamesEveryBadVariable(t *testing.T) {
	t.Parallel()

	const bad = "!not-a-valid-value!"
	free := map[string]bool{ // free text (or a path checked later): any value is a value
		"OUTBOX_API_TOKENS_FILE": false,
		"OUTBOX_STRIPE_KEY":      true, "OUTBOX_UI_PASSWORD": true, "OUTBOX_UI_USER": true,
		"OUTBOX_ZENDESK_EMAIL": true, "OUTBOX_ZENDESK_TOKEN": true, "OUTBOX_SMTP_USER": true,
		"OUTBOX_SMTP_PASSWORD": true, "OUTBOX_SMTP_FROM": true, "OUTBOX_NAMESPACE": true,
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		field := typ.Field(i).Name
		name := envName(field)
		if name == "" {
			continue // not read from the environment
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:5432/db", name: bad}
			if name == "DATABASE_URL" {
				env = map[string]string{name: bad}
			}
			_, err := loadConfig(context.Background(), envconfig.MapLookuper(env))
			if err == nil {
				require.True(t, free[name], "%s accepted %q", name, bad)
				return
			}
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "%s: %v", name, err)
			require.Equal(t, name, ce.Var)
			if fieldTag(field, "secret") == "true" {
				require.NotContains(t, err.Error(), bad)
			}
		})
	}
}

// The session timeouts' defaults are dbutil's constants, which the
// variables' tags spell again for --help and go-envconfig.
func TestSessionTimeoutDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, dbutil.StatementTimeoutDefault.String(), envDefault("StatementTimeout"))
	require.Equal(t, dbutil.LockTimeoutDefault.String(), envDefault("LockTimeout"))
}

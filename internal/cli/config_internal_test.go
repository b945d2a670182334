package cli

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/dbutil"
)

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

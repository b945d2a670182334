package redact_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/redact"
)

func TestKey(t *testing.T) {
	t.Parallel()

	for _, k := range []string{"to", "To", "BODY", "payload", "password"} {
		require.True(t, redact.Key(k), k)
	}
	for _, k := range []string{"amount", "currency", "endpoint", "customer"} {
		require.False(t, redact.Key(k), k)
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()

	got := redact.JSON(json.RawMessage(`{"to": ["ada@example.com"], "subject": "Hi Ada", "amount": 12345678901234567890,
		"nested": {"Body": "dear Ada", "list": [{"cc": "bob@example.com", "kept": 1e400}]}, "currency": "usd"}`))
	for _, secret := range []string{"ada@example.com", "Hi Ada", "dear Ada", "bob@example.com"} {
		require.NotContains(t, got, secret)
	}
	for _, kept := range []string{`"currency": "usd"`, "12345678901234567890", "1e400", `"to": "[redacted]"`, `"Body": "[redacted]"`} {
		require.Contains(t, got, kept)
	}
	require.Equal(t, redact.Value, redact.JSON(json.RawMessage(`{"to":`)))
}

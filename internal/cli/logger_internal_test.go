package cli

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoggerRedacts checks the net under every log line: personal fields and
// secrets are replaced whatever logs them, in both formats.
func TestLoggerRedacts(t *testing.T) {
	t.Parallel()

	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		logger := newLogger(&Config{LogFormat: format, logLevel: slog.LevelDebug}, &buf)
		logger.Debug("careless line",
			slog.Any("args", map[string]any{"to": "ada@example.com"}),
			slog.Group("email", slog.String("To", "ada@example.com"), slog.String("body", "dear Ada")),
			slog.String("password", "hunter2"), slog.String("token", "s3cret"),
			slog.String("effect", "email"), slog.Int64("intent_id", 7))
		out := buf.String()
		require.NotContains(t, out, "ada@example.com", format)
		require.NotContains(t, out, "dear Ada", format)
		require.NotContains(t, out, "hunter2", format)
		require.NotContains(t, out, "s3cret", format)
		require.Contains(t, out, redactedValue, format)
		require.Contains(t, out, "email", format) // values are not keys
		require.Contains(t, out, "intent_id", format)
	}
}

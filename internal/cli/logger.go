package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/outbox-dev/outbox/internal/redact"
	"github.com/outbox-dev/outbox/internal/telemetry"
)

// redactedValue replaces the value of a redacted key: an effect's personal
// fields (addresses, subjects, bodies), whole argument objects, and secrets
// (redact.Key). Nothing in outbox logs them; this is the net under a line
// that someone adds later, or a library's.
const redactedValue = redact.Value

// newLogger returns the logger of cfg: text or JSON on w, at cfg's level,
// with the values of redactedKeys replaced.
func newLogger(cfg *Config, w io.Writer) *slog.Logger {
	return newLoggerAt(cfg, w, cfg.logLevel)
}

// newCommandLogger is the logger of a one-shot command (intents, enqueue):
// warnings and errors only, whatever OUTBOX_LOG_LEVEL, because the command
// prints its own line for what the library logs at info (an intent
// cancelled or resolved), and the intent records it.
func newCommandLogger(cfg *Config, w io.Writer) *slog.Logger {
	return newLoggerAt(cfg, w, max(cfg.logLevel, slog.LevelWarn))
}

func newLoggerAt(cfg *Config, w io.Writer, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: redactAttr}
	// The trace's ids on lines logged within a span (traces are off unless
	// configured, and then no span is valid: nothing is added).
	if cfg.LogFormat == "json" {
		return slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(w, opts)))
	}
	return slog.New(telemetry.NewLogHandler(slog.NewTextHandler(w, opts)))
}

// redactAttr is the handlers' ReplaceAttr.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	if redact.Key(a.Key) {
		return slog.String(a.Key, redactedValue)
	}
	return a
}

// parseLevel reads OUTBOX_LOG_LEVEL's four levels, in any case.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q", s)
}

package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// newLogger returns the logger of cfg: text or JSON on w, at cfg's level.
func newLogger(cfg *Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel) // checked by loadConfig
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
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

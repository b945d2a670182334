package mcpserver

import (
	"context"
	"log/slog"
)

// SDKLogger returns the logger to hand the SDK (mcp.ServerOptions.Logger,
// mcp.StreamableHTTPOptions.Logger): logger's handler, keeping warnings and
// errors only. At info level the SDK reports the start and end of every
// session, and over stateless HTTP every request is one.
func SDKLogger(logger *slog.Logger) *slog.Logger {
	return slog.New(&minLevelHandler{Handler: logger.Handler(), min: slog.LevelWarn})
}

type minLevelHandler struct {
	slog.Handler
	min slog.Level
}

func (h *minLevelHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= h.min && h.Handler.Enabled(ctx, level)
}

func (h *minLevelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &minLevelHandler{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h *minLevelHandler) WithGroup(name string) slog.Handler {
	return &minLevelHandler{Handler: h.Handler.WithGroup(name), min: h.min}
}

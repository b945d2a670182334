package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler adds trace_id and span_id to every record logged with a context
// that carries a valid span, so that a log line leads to its trace and a
// trace to its lines. Records without a span are passed on unchanged.
type LogHandler struct {
	handler slog.Handler
}

// NewLogHandler wraps handler.
func NewLogHandler(handler slog.Handler) *LogHandler { return &LogHandler{handler: handler} }

// Enabled reports the wrapped handler's answer.
func (h *LogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.handler.Enabled(ctx, level)
}

// Handle adds the span's ids, when there is one, and passes the record on.
// The record is cloned first: a handler must not change the record it was
// given, which other handlers may share.
func (h *LogHandler) Handle(ctx context.Context, record slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		record = record.Clone()
		record.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.handler.Handle(ctx, record)
}

// WithAttrs returns a LogHandler over the wrapped handler's WithAttrs.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &LogHandler{handler: h.handler.WithAttrs(attrs)}
}

// WithGroup returns a LogHandler over the wrapped handler's WithGroup. The
// ids of a record logged in a group land in that group: slog gives a
// handler no way back to the top level.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{handler: h.handler.WithGroup(name)}
}

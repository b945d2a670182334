package mcpserver

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkTraceToolCalls measures what the tool calls' spans cost with
// traces off: a call's handler bare, then inside the middleware with a
// no-op provider and with the global one no process configured.
func BenchmarkTraceToolCalls(b *testing.B) {
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) { return &mcp.CallToolResult{}, nil }
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "charge_card"}}
	tools := []string{"charge_card"}
	for _, bench := range []struct {
		name    string
		handler mcp.MethodHandler
	}{
		{"Bare", next},
		{"Noop", traceToolCalls(noop.NewTracerProvider().Tracer(tracerName), tools)(next)},
		{"GlobalUnset", traceToolCalls(otel.GetTracerProvider().Tracer(tracerName), tools)(next)},
	} {
		b.Run(bench.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				_, _ = bench.handler(ctx, methodCallTool, req)
			}
		})
	}
}

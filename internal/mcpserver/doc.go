// Package mcpserver is outbox's MCP server, on the official SDK
// (github.com/modelcontextprotocol/go-sdk): the tools an AI agent calls to
// record side effects as intents and to read their outcomes.
//
// The mutating tools (charge_card, send_email, create_ticket, call_webhook;
// see EffectTools) each take an effect's arguments plus an optional
// idempotency_key and answer with the intent and "duplicate", like the HTTP
// API's POST /v1/intents. Without a key a call falls back to an automatic
// key over the tool and its arguments in canonical form, within
// Config.AutoKeyWindow (package autokey; docs/agents.md). get_intent (which
// can wait until the intent is terminal) and list_intents only read.
//
// Every error a call can cause is a tool result with isError set and the
// error's code in its structured content ({"error": {"code", "message"}}),
// never a protocol error, so that the model sees it and can correct itself.
//
// Every tool call runs in an OpenTelemetry span "execute_tool {tool}"
// (Config.TracerProvider; none unless the process configured traces),
// continuing the trace context the host sent in params._meta, so that the
// intent a call enqueues records the call's span as its origin.
//
// A client that declares the tasks extension gets its recorded calls as
// durable tasks (tasks/get, tasks/update, tasks/cancel), and may listen for
// their status (subscriptions/listen with taskIds): serve such a server
// behind ListenHandler over HTTP, or over ListenTransport on stdio, which
// answer those listens ahead of the SDK (docs/agents.md, "Tasks and
// approvals in the host").
//
// One server acts in one namespace: outboxd mcp serves OUTBOX_NAMESPACE over
// stdio, and the HTTP API serves one server per namespace of its tokens at
// /mcp (package httpapi).
package mcpserver

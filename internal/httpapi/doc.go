// Package httpapi is outbox's HTTP API (docs/agents.md, "Over HTTP"), which
// outboxd serve mounts beside /healthz, /readyz and /metrics (package
// daemon):
//
//	POST /v1/intents                  enqueue; header Idempotency-Key required
//	GET  /v1/intents/{key}[?wait=30s] read, optionally waiting until terminal
//	GET  /v1/intents                  list: state, effect, limit, cursor
//	POST /v1/intents/{key}/cancel     pending (or awaiting approval) to cancelled
//	POST /v1/intents/{key}/resolve    an operator's decision on an unknown intent
//	POST /v1/intents/{key}/approve    an operator's approval, bound to args_sha256
//	POST /v1/intents/{key}/deny       an operator's denial, bound to args_sha256
//	GET  /v1/effects                  the effects this server runs, with their args' schemas
//	GET  /v1/openapi.json             the OpenAPI 3.1 document of /v1 (openapi.yaml)
//	/mcp                              MCP over streamable HTTP (package mcpserver)
//
// Roles (internal/access): reader reads and waits, agent also enqueues and
// cancels, operator also resolves, approves and denies.
//
// Every answer is JSON; errors are {"error": {"code", "message"}}, plus
// "field" when one input is at fault. A client's mistake is always a 4xx with
// a code, never a 5xx.
//
// A bearer token picks the request's namespace, and every operation is
// scoped to it: another namespace's key is a plain 404. Tokens are compared
// in constant time. Without tokens the API answers, as namespace default,
// only requests that came through a loopback address.
//
// Request bodies are at most 1 MiB and decoded strictly: unknown fields,
// duplicate names, invalid UTF-8, values of the wrong type, nesting deeper
// than 64 levels and data after the object are refused with invalid_json,
// naming the problem.
package httpapi

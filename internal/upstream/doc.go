// Package upstream is outbox in front of MCP servers: the upstreams an
// effects file declares (its upstreams member), docs/effects.md, "In front
// of an MCP server", is its reference.
//
// ParseFile and LoadFile check an effects file: its HTTP effects
// (effects/declared) and its upstreams, each an Upstream with its tools'
// declarations (ToolDecl). Pin lists an upstream's tools into the lock
// (Lock, ReadLock, WriteLock: what `outboxd effects pin` writes), so that
// no process needs an upstream to start and replicas agree. Bind joins the
// file and the lock into a Catalog: each recorded tool a Tool, an
// effects.Effect whose attempt calls the upstream tool once through a Conn
// (stdio children or streamable HTTP sessions), and each read-only tool a
// PassthroughTool forwarded live. Catalog.Start compares every upstream's
// listing with the lock and withdraws a tool that drifted.
//
// Nothing outside outboxd uses this package; the file machinery it shares
// with declared HTTP effects (YAML positions, placeholders, CEL, schemas,
// file errors, outcome rules) is internal/effectfile.
package upstream

// Package declared is HTTP effects declared in a file rather than written
// in Go: docs/effects.md, "Declaring an HTTP effect", is its reference.
// Load and Parse check a file (YAML 1.2 or JSON) and return its effects,
// each an effects.Effect like the built-ins (and an effects.Reconciler,
// effects.RequestReconciler and effects.Declarer): its arguments checked by
// a JSON Schema 2020-12, its request built from placeholders that never
// reach the scheme, host or port, its answer classified by CEL rules and
// then the default classes, its secrets scrubbed from everything it
// returns. Presets returns the catalogue of providers compiled in
// (presets.yaml).
//
// The same file may declare MCP upstreams (its upstreams member): outboxd
// checks and runs those, and Parse leaves them to it. Every problem Load
// and Parse find is a FileError, with its file, line, effect and field.
package declared

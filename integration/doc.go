// Package integration holds outbox's end-to-end tests: real outboxd
// processes, killed and restarted, against a real PostgreSQL, with effects
// counted where the provider records them.
package integration

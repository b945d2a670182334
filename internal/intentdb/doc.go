// Package intentdb owns the intent table: every SQL statement on
// outbox_intent and its companion tables, the reads of River's tables that
// follow an intent (its jobs, the leader), the notification channels and
// their payloads, the rendering of statements for a schema, and the enqueue
// notify window.
//
// The write side (package outbox), the dispatcher's drain, the workers, the
// prune job, the metrics, the key guard and the operator console all call
// it, so that a change to the table or to a notification is made in one
// place. It executes statements on whatever executor it is given (a pool, a
// connection, the caller's transaction) and never begins or commits a
// transaction of its own: transaction boundaries belong to its callers.
//
// It knows rows, not behaviour: which state follows an attempt is decided by
// package workers, what a caller may do by package outbox.
package intentdb

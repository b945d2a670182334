// Package testrun runs outbox's long-lived parts inside a test: a dispatcher
// (Dispatcher) or the whole outboxd serve command in process (Serve). Each
// runs until the test ends, then is stopped and waited for, so that a test
// leaves no goroutine behind to trip goleak or write into a dropped schema.
//
// It is plumbing for this repository's own tests; helpers for users' tests
// are public (see outboxtest).
package testrun

package outboxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// ExampleTB stands in for a test's testing.TB where there is none, in an
// Example function above all, so that an example reads as a test would:
// a failure panics, which fails the example, with what was logged before
// it; Cleanup's functions run when Close is called. In a test, pass the
// test's *testing.T instead.
//
//	t := outboxtest.NewExampleTB()
//	defer t.Close()
//	schema := outboxtest.MigrateSchema(ctx, t, pool)
//
// Only the methods of testing.TB that report, log, clean up and give a
// context are implemented (Skip and its kin panic, an example having no way
// to be skipped; TempDir and Setenv panic as a nil testing.TB would).
type ExampleTB struct {
	// The embedded nil interface supplies testing.TB's unexported method,
	// which only the testing package may implement.
	testing.TB

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cleanups []func()
	logged   strings.Builder
}

// NewExampleTB returns an ExampleTB. Call Close when the example ends.
func NewExampleTB() *ExampleTB {
	ctx, cancel := context.WithCancel(context.Background())
	return &ExampleTB{ctx: ctx, cancel: cancel}
}

// Close cancels Context's context and runs the functions given to Cleanup,
// the last first, as the testing package does when a test ends.
func (tb *ExampleTB) Close() {
	tb.cancel()
	for {
		tb.mu.Lock()
		if len(tb.cleanups) == 0 {
			tb.mu.Unlock()
			return
		}
		fn := tb.cleanups[len(tb.cleanups)-1]
		tb.cleanups = tb.cleanups[:len(tb.cleanups)-1]
		tb.mu.Unlock()
		fn()
	}
}

// Cleanup registers fn to run at Close.
func (tb *ExampleTB) Cleanup(fn func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, fn)
}

// Context returns a context cancelled at Close.
func (tb *ExampleTB) Context() context.Context { return tb.ctx }

// Error logs args and panics.
func (tb *ExampleTB) Error(args ...any) { tb.fail(fmt.Sprintln(args...)) }

// Errorf logs the formatted message and panics.
func (tb *ExampleTB) Errorf(format string, args ...any) { tb.fail(fmt.Sprintf(format, args...)) }

// Fail panics with what was logged.
func (tb *ExampleTB) Fail() { tb.fail("") }

// FailNow panics with what was logged.
func (tb *ExampleTB) FailNow() { tb.fail("") }

// Failed reports false: a failure never returns.
func (tb *ExampleTB) Failed() bool { return false }

// Fatal logs args and panics.
func (tb *ExampleTB) Fatal(args ...any) { tb.fail(fmt.Sprintln(args...)) }

// Fatalf logs the formatted message and panics.
func (tb *ExampleTB) Fatalf(format string, args ...any) { tb.fail(fmt.Sprintf(format, args...)) }

// Helper does nothing.
func (tb *ExampleTB) Helper() {}

// Log keeps args for the message of a later failure; an example's output is
// what it prints, which logs must not change.
func (tb *ExampleTB) Log(args ...any) { tb.log(fmt.Sprintln(args...)) }

// Logf keeps the formatted message for a later failure, as Log does.
func (tb *ExampleTB) Logf(format string, args ...any) { tb.log(fmt.Sprintf(format, args...)) }

// Name returns "Example".
func (tb *ExampleTB) Name() string { return "Example" }

// Skip panics: an example cannot be skipped.
func (tb *ExampleTB) Skip(args ...any) { tb.fail("skipped: " + fmt.Sprintln(args...)) }

// SkipNow panics: an example cannot be skipped.
func (tb *ExampleTB) SkipNow() { tb.fail("skipped") }

// Skipf panics: an example cannot be skipped.
func (tb *ExampleTB) Skipf(format string, args ...any) {
	tb.fail("skipped: " + fmt.Sprintf(format, args...))
}

// Skipped reports false.
func (tb *ExampleTB) Skipped() bool { return false }

func (tb *ExampleTB) log(s string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.logged.WriteString(s)
	if !strings.HasSuffix(s, "\n") {
		tb.logged.WriteByte('\n')
	}
}

func (tb *ExampleTB) fail(s string) {
	tb.mu.Lock()
	msg := tb.logged.String() + s
	tb.mu.Unlock()
	panic(strings.TrimSpace(msg))
}

package testrun

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/outboxtest"
)

const (
	// effectTimeoutDefault is the attempts' timeout of a Dispatcher whose
	// config sets none: short enough that a hung effect fails the test in
	// seconds, long enough for a loaded CI machine.
	effectTimeoutDefault = 5 * time.Second

	// stopTimeout bounds serve's stop at the test's end.
	stopTimeout = 30 * time.Second
)

// Dispatcher starts a dispatcher on pool with config (EffectTimeout defaults
// to five seconds) and stops it when the test ends, through the public
// outboxtest.StartDispatcher. config must name the effects and schema, as
// for dispatcher.New.
func Dispatcher(tb testing.TB, pool *pgxpool.Pool, config *dispatcher.Config) *dispatcher.Dispatcher {
	tb.Helper()
	configCopy := *config
	if configCopy.EffectTimeout == 0 {
		configCopy.EffectTimeout = effectTimeoutDefault
	}
	return outboxtest.StartDispatcher(context.Background(), tb, pool, &configCopy)
}

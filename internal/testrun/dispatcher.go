package testrun

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
)

const (
	// effectTimeoutDefault is the attempts' timeout of a Dispatcher whose
	// config sets none: short enough that a hung effect fails the test in
	// seconds, long enough for a loaded CI machine.
	effectTimeoutDefault = 5 * time.Second

	// stopTimeout bounds a dispatcher's or serve's stop at the test's end.
	stopTimeout = 30 * time.Second
)

// Dispatcher starts a dispatcher on pool with config (EffectTimeout defaults
// to five seconds) and stops it when the test ends. config must name the
// effects and schema, as for dispatcher.New.
func Dispatcher(tb testing.TB, pool *pgxpool.Pool, config *dispatcher.Config) *dispatcher.Dispatcher {
	tb.Helper()
	configCopy := *config
	if configCopy.EffectTimeout == 0 {
		configCopy.EffectTimeout = effectTimeoutDefault
	}
	d, err := dispatcher.New(pool, &configCopy)
	if err != nil {
		tb.Fatalf("testrun: %v", err)
	}
	if err := d.Start(context.Background()); err != nil {
		tb.Fatalf("testrun: error starting dispatcher: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			tb.Errorf("testrun: error stopping dispatcher: %v", err)
		}
	})
	return d
}

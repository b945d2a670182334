package intentdb

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ListenerConfig configures Listen.
type ListenerConfig struct {
	// Channel is the notification channel to LISTEN on. Required.
	Channel string

	// ListeningFunc is called each time LISTEN is in effect: at first, and
	// after every reconnection. A notification sent while the listener was
	// reconnecting is lost, so callers treat this as "something may have
	// changed". Defaults to nil.
	ListeningFunc func()

	// Logger receives a warning each time the connection is lost. Defaults
	// to a logger that discards.
	Logger *slog.Logger

	// Name says in log lines which listener lost its connection ("drain",
	// "intent waiter").
	Name string

	// NotifyFunc receives every notification's payload. It runs on the
	// listening goroutine, so it must not block. Required.
	NotifyFunc func(payload string)
}

// Listen holds one LISTEN connection on config.Channel until ctx ends,
// reconnecting with a growing backoff when the connection breaks (PostgreSQL
// restarted, backend terminated). It returns when ctx ends.
func Listen(ctx context.Context, pool *pgxpool.Pool, config *ListenerConfig) {
	logger := config.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	channel := pgx.Identifier{config.Channel}.Sanitize()
	const backoffMin, backoffMax = 50 * time.Millisecond, 5 * time.Second
	backoff := backoffMin
	for ctx.Err() == nil {
		err := func() error {
			pooled, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			// A LISTENing connection must never go back to the pool, where
			// another user would inherit its subscription.
			conn := pooled.Hijack()
			defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing a broken connection
			if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
				return err
			}
			backoff = backoffMin
			if config.ListeningFunc != nil {
				config.ListeningFunc()
			}
			for {
				notification, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				config.NotifyFunc(notification.Payload)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		logger.WarnContext(ctx, config.Name+" listener lost its connection, reconnecting", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

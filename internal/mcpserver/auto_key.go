package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-dev/outbox/internal/autokey"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/outbox"
)

// enqueueAuto enqueues a call that carries no idempotency key under its
// automatic key (docs/agents.md, "Keys for agents").
//
// The key belongs to a window of AutoKeyWindow, and the window is the one of
// the first identical call, as long as that call is less than one window
// old: a call looks for the previous window's key, and reuses it when that
// intent was created less than a window ago; otherwise it takes the current
// window's key. So identical calls within one window of the first are one
// action wherever the windows' boundaries fall, and a call one window or more
// after the first starts a new action.
//
// The look-up and the enqueue are one transaction holding an advisory lock
// on (namespace, tool, arguments): without it two identical calls on either
// side of a boundary could each miss the other's uncommitted intent and start
// two actions. The lock is taken before the clock is read, so a call that
// waited for it reads a time after the first call's commit. The clock is the
// database's, the same for every replica of serve.
func (s *server) enqueueAuto(ctx context.Context, tool *EffectTool, args []byte) (*outbox.EnqueueResult, error) {
	canonical, err := autokey.Canonicalize(args)
	if err != nil {
		return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "args", Message: err.Error()}
	}
	return dbutil.WithTxV(ctx, s.pool, func(tx pgx.Tx) (*outbox.EnqueueResult, error) {
		var now time.Time
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp() FROM pg_advisory_xact_lock($1)`,
			autokey.LockID(s.namespace, tool.Name, canonical)).Scan(&now); err != nil {
			return nil, fmt.Errorf("error locking the automatic key: %w", err)
		}
		key, err := s.autoKey(ctx, tx, tool.Name, canonical, now)
		if err != nil {
			return nil, err
		}
		return s.client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{
			Args:      json.RawMessage(args),
			Effect:    tool.Effect,
			Key:       key,
			KeySource: outbox.KeySourceAuto,
			Namespace: s.namespace,
		})
	})
}

// autoKey picks the automatic key of a call at now: the previous window's,
// if its intent is less than a window old, else the current window's.
func (s *server) autoKey(ctx context.Context, tx pgx.Tx, tool string, canonical []byte, now time.Time) (string, error) {
	start := autokey.WindowStart(now, s.autoKeyWindow)
	previous := autokey.Key(tool, canonical, start.Add(-s.autoKeyWindow))
	createdAt, err := s.queries.CreatedAt(ctx, tx, s.namespace, previous)
	switch {
	case err == nil && now.Sub(createdAt) < s.autoKeyWindow:
		return previous, nil
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("error reading the previous automatic key: %w", err)
	}
	return autokey.Key(tool, canonical, start), nil
}

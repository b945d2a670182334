package outbox

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

const (
	// groupMax and groupMaxBytes bound one group's statement: its intents,
	// and their arguments' bytes (a group never refuses a call for its
	// size: one call alone may exceed groupMaxBytes).
	groupMax      = 500
	groupMaxBytes = 8 << 20
	// groupLockWait is how long a group's statement waits for any one lock
	// (another transaction holding one of its keys uncommitted, or
	// updating a row of a key recorded before) before its calls go alone,
	// where only the call of that key waits.
	groupLockWait = 50 * time.Millisecond
	// groupTimeout bounds a group's statement even for callers without a
	// deadline, so that a connection that stopped answering cannot hold
	// every later call for good. Past it the group's calls get an error.
	groupTimeout = 30 * time.Second
)

// enqueueGroup joins concurrent Enqueue calls into one statement (group
// commit): while a group's statement runs, the calls that arrive wait, and
// go together as the next group. A busy HTTP API then pays one statement,
// one commit and one WAL flush for many intents, where one at a time each
// paid its own; a lone call goes at once. docs/design.md, "Enqueues without
// a caller's transaction", has the why and the figures.
type enqueueGroup struct {
	// run records calls' intents and answers each call.
	run func(calls []*groupCall)

	mu      sync.Mutex
	waiting []*groupCall
	running bool // a goroutine is running groups
}

// groupCall is one Enqueue waiting for its group.
type groupCall struct {
	ctx context.Context
	row *intentdb.EnqueueRow
	// res and err are the answer, set before done closes. Both nil means
	// the group could not answer this call: it enqueues alone.
	res  *intentdb.EnqueueResult
	err  error
	done chan struct{}
}

// do queues row for the next group and waits for its answer, or for ctx to
// end. A call that ends with ctx before its group's statement is sent
// writes nothing; after, it may be recorded (as when a single statement is
// cancelled in flight): enqueuing the key again answers with its state.
func (g *enqueueGroup) do(ctx context.Context, row *intentdb.EnqueueRow) (*intentdb.EnqueueResult, error) {
	call := &groupCall{ctx: ctx, row: row, done: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, call)
	if !g.running {
		g.running = true
		go g.loop()
	}
	g.mu.Unlock()
	select {
	case <-call.done:
		return call.res, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// loop runs groups, one statement at a time, until none is waiting.
func (g *enqueueGroup) loop() {
	for {
		g.mu.Lock()
		n, size := 0, 0
		for n < min(len(g.waiting), groupMax) && (n == 0 || size+len(g.waiting[n].row.Args) <= groupMaxBytes) {
			size += len(g.waiting[n].row.Args)
			n++
		}
		if n == 0 {
			g.running = false
			g.waiting = nil
			g.mu.Unlock()
			return
		}
		calls := g.waiting[:n:n]
		g.waiting = append([]*groupCall(nil), g.waiting[n:]...)
		g.mu.Unlock()
		g.run(calls)
	}
}

// live closes the calls whose callers have gone (nothing of theirs is
// written) and returns the others.
func live(calls []*groupCall) []*groupCall {
	out := make([]*groupCall, 0, len(calls))
	for _, call := range calls {
		if call.ctx.Err() != nil {
			close(call.done)
			continue
		}
		out = append(out, call)
	}
	return out
}

// runGroup is the Client's enqueueGroup.run: one statement for every call
// still waiting.
func (c *Client) runGroup(calls []*groupCall) {
	calls = live(calls)
	if len(calls) == 0 {
		return
	}
	// The statement serves every call of the group: no one caller's
	// cancellation stops it, but it is cancelled when all have given up,
	// and after groupTimeout whatever they do.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(calls[0].ctx), groupTimeout)
	defer cancel()
	var waiting atomic.Int32
	waiting.Store(int32(len(calls))) //nolint:gosec // at most groupMax
	stops := make([]func() bool, len(calls))
	for i, call := range calls {
		stops[i] = context.AfterFunc(call.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	var results []*intentdb.EnqueueResult
	conn, err := c.pool.Acquire(ctx)
	if err == nil {
		// The connection may have taken a while: a caller that gave up
		// meanwhile is left out, so that nothing of it is sent.
		if calls = live(calls); len(calls) > 0 {
			rows := make([]*intentdb.EnqueueRow, len(calls))
			for i, call := range calls {
				rows[i] = call.row
			}
			results, err = c.queries.EnqueueGroup(ctx, conn, rows, groupLockWait)
		}
		conn.Release()
	}
	for _, stop := range stops {
		stop()
	}
	if c.groupHook != nil {
		c.groupHook(calls, err)
	}
	for i, call := range calls {
		switch {
		case err == nil:
			call.res = results[i] // nil: the key was being recorded elsewhere
		case alone(err):
			// Nothing was written: each call goes alone, so that a row
			// the database refuses fails only its own call.
		default:
			call.err = err
		}
		close(call.done)
	}
}

// alone reports whether a group's statement failed having written nothing,
// so that its calls may each be enqueued alone: it was not sent, or the
// database refused it (one statement outside a transaction is atomic). An
// error that ended the connection (FATAL, or a class 08 or 57P code, which
// a pooler may send after the server committed) is not taken as refusal.
func alone(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Severity == "ERROR" && !pgerrcode.IsConnectionException(pgErr.Code) && !endsSession(pgErr.Code)
	}
	return pgconn.SafeToRetry(err)
}

// endsSession reports whether code is one of class 57's that end the
// session (57P: a shutdown, a dropped database, an idle timeout), as
// opposed to a cancelled statement (57014), which wrote nothing.
func endsSession(code string) bool {
	switch code {
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow, pgerrcode.DatabaseDropped, pgerrcode.IdleSessionTimeout:
		return true
	}
	return false
}

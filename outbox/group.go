package outbox

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

const (
	// groupMax bounds the intents of one group's statement.
	groupMax = 500
	// groupLockWait is how long a group's statement waits for another
	// transaction holding one of its keys uncommitted before its calls
	// go alone (where only the call of that key waits, as before).
	groupLockWait = 50 * time.Millisecond
)

// enqueueGroup joins concurrent Enqueue calls into one statement (group
// commit): while a group's statement runs, the calls that arrive wait, and
// go together as the next group. A busy HTTP API then pays one statement,
// one commit and one WAL flush for many intents, where one at a time each
// paid its own; a lone call goes at once, as before. docs/design.md,
// "Enqueues without a caller's transaction", has the why and the figures.
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
// end. A call that ends with ctx before its group runs writes nothing; one
// whose group is already running may still be recorded (as when a single
// statement is cancelled after it was sent): enqueuing the key again
// answers with its state.
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
		n := min(len(g.waiting), groupMax)
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

// runGroup is the Client's enqueueGroup.run: one statement on the pool for
// every call still waiting.
func (c *Client) runGroup(calls []*groupCall) {
	live := make([]*groupCall, 0, len(calls))
	for _, call := range calls {
		if call.ctx.Err() != nil {
			close(call.done) // its caller has gone: write nothing
			continue
		}
		live = append(live, call)
	}
	if len(live) == 0 {
		return
	}
	rows := make([]*intentdb.EnqueueRow, len(live))
	for i, call := range live {
		rows[i] = call.row
	}
	// The statement serves every call of the group: no one caller's
	// cancellation stops it, but when all have given up it is cancelled
	// (a database that stopped answering must not hold the loop for good).
	ctx, cancel := context.WithCancel(context.WithoutCancel(live[0].ctx))
	defer cancel()
	var waiting atomic.Int32
	waiting.Store(int32(len(live)))
	stops := make([]func() bool, len(live))
	for i, call := range live {
		stops[i] = context.AfterFunc(call.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	results, err := c.queries.EnqueueGroup(ctx, c.pool, rows, groupLockWait)
	for _, stop := range stops {
		stop()
	}
	for i, call := range live {
		switch {
		case err == nil:
			call.res = results[i] // nil: the key was being inserted elsewhere
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
// so that its calls may each be enqueued alone: the database refused it
// (one statement outside a transaction is atomic), or it was not sent.
func alone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || pgconn.SafeToRetry(err)
}

package outbox

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// notifier shares one LISTEN connection among every Wait of a Client, so
// that a thousand waiting agents cost one connection, not a thousand. It runs
// only while someone waits: the last waiter to leave stops it.
type notifier struct {
	client *Client

	mu      sync.Mutex
	subs    map[int64]map[*subscription]struct{}
	cancel  context.CancelFunc
	ready   chan struct{} // closed while LISTEN is in effect
	stopped chan struct{} // closed when the current run has ended
}

type subscription struct {
	// wake receives a signal when the intent may have become terminal, and
	// after the listener reconnected (a change may have been missed).
	wake chan struct{}
}

func newNotifier(c *Client) *notifier {
	return &notifier{client: c, subs: map[int64]map[*subscription]struct{}{}}
}

// subscribe registers interest in intent id. ready is closed once LISTEN is
// in effect: a change committed after that is signalled on sub.wake. The
// caller must call unsubscribe.
func (n *notifier) subscribe(id int64) (sub *subscription, ready <-chan struct{}, unsubscribe func()) {
	sub = &subscription{wake: make(chan struct{}, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs[id] == nil {
		n.subs[id] = map[*subscription]struct{}{}
	}
	n.subs[id][sub] = struct{}{}
	if n.cancel == nil {
		// A run that is still winding down keeps its own channels; this
		// one gets fresh ones.
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel = cancel
		n.ready = make(chan struct{})
		n.stopped = make(chan struct{})
		go n.run(ctx, n.ready, n.stopped)
	}
	return sub, n.ready, func() { n.unsubscribe(id, sub) }
}

func (n *notifier) unsubscribe(id int64, sub *subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.subs[id], sub)
	if len(n.subs[id]) == 0 {
		delete(n.subs, id)
	}
	if len(n.subs) == 0 && n.cancel != nil {
		n.cancel()
		n.cancel = nil
	}
}

// wake signals the subscribers of ids, or all of them when ids is nil.
func (n *notifier) wake(ids []int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	signal := func(sub *subscription) {
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
	if ids == nil {
		for _, subs := range n.subs {
			for sub := range subs {
				signal(sub)
			}
		}
		return
	}
	for _, id := range ids {
		for sub := range n.subs[id] {
			signal(sub)
		}
	}
}

func (n *notifier) run(ctx context.Context, ready, stopped chan struct{}) {
	defer close(stopped)
	channel := pgx.Identifier{n.client.channelChanged}.Sanitize()
	backoff := 50 * time.Millisecond
	readyClosed := false
	for ctx.Err() == nil {
		err := func() error {
			pooled, err := n.client.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			// A LISTENing connection must never go back to the pool.
			conn := pooled.Hijack()
			defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
			if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
				return err
			}
			backoff = 50 * time.Millisecond
			if !readyClosed {
				close(ready)
				readyClosed = true
			}
			// Changes may have been missed while (re)connecting: every
			// waiter reads its intent again.
			n.wake(nil)
			for {
				notification, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				if ids := terminalIDs(notification.Payload); len(ids) > 0 {
					n.wake(ids)
				}
			}
		}()
		if ctx.Err() != nil {
			return
		}
		n.client.logger.WarnContext(ctx, "intent waiter lost its connection, reconnecting", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// terminalIDs parses a state-change payload, "<state> <id>[,<id>...]", and
// returns its ids when the state is terminal.
func terminalIDs(payload string) []int64 {
	state, list, ok := strings.Cut(payload, " ")
	if !ok || !State(state).Terminal() {
		return nil
	}
	ids := make([]int64, 0, strings.Count(list, ",")+1)
	for list != "" {
		var next string
		next, list, _ = strings.Cut(list, ",")
		if id, err := strconv.ParseInt(next, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

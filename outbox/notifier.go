package outbox

import (
	"context"
	"sync"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

// notifier shares one LISTEN connection among every Wait of a Client, so
// that a thousand waiting agents cost one connection, not a thousand. It runs
// only while someone waits: the last waiter to leave stops it.
type notifier struct {
	client *Client

	mu     sync.Mutex
	subs   map[int64]map[*subscription]struct{}
	cancel context.CancelFunc
	ready  chan struct{} // closed once LISTEN is in effect
}

type subscription struct {
	// wake receives a signal when the intent may have become terminal, and
	// after the listener reconnected (a change may have been missed).
	wake chan struct{}
	// every asks for a signal on every state change (Watch), not only on
	// those a Wait returns on.
	every bool
}

func newNotifier(c *Client) *notifier {
	return &notifier{client: c, subs: map[int64]map[*subscription]struct{}{}}
}

// subscribe registers interest in intent id. ready is closed once LISTEN is
// in effect: a change committed after that is signalled on sub.wake. The
// caller must call unsubscribe.
func (n *notifier) subscribe(id int64) (sub *subscription, ready <-chan struct{}, unsubscribe func()) {
	sub = &subscription{wake: make(chan struct{}, 1)}
	ready, unsubscribe = n.add(sub, []int64{id})
	return sub, ready, unsubscribe
}

// add registers sub's interest in the intents ids, as subscribe does.
func (n *notifier) add(sub *subscription, ids []int64) (ready <-chan struct{}, unsubscribe func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		if n.subs[id] == nil {
			n.subs[id] = map[*subscription]struct{}{}
		}
		n.subs[id][sub] = struct{}{}
	}
	if n.cancel == nil {
		// A run that is still winding down keeps its own channels; this
		// one gets fresh ones.
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel = cancel
		n.ready = make(chan struct{})
		go n.run(ctx, n.ready)
	}
	return n.ready, func() { n.unsubscribe(ids, sub) }
}

func (n *notifier) unsubscribe(ids []int64, sub *subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		delete(n.subs[id], sub)
		if len(n.subs[id]) == 0 {
			delete(n.subs, id)
		}
	}
	if len(n.subs) == 0 && n.cancel != nil {
		n.cancel()
		n.cancel = nil
	}
}

// wake signals the subscribers of ids, or all of them when ids is nil; when
// onlyEvery, only those that asked for every change (a change no Wait
// returns on).
func (n *notifier) wake(ids []int64, onlyEvery bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	signal := func(sub *subscription) {
		if onlyEvery && !sub.every {
			return
		}
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

func (n *notifier) run(ctx context.Context, ready chan struct{}) {
	readyClosed := false
	intentdb.Listen(ctx, n.client.listenPool, &intentdb.ListenerConfig{
		Channel: intentdb.ChannelChanged(n.client.schema),
		ListeningFunc: func() {
			if !readyClosed {
				close(ready)
				readyClosed = true
			}
			// Changes may have been missed while (re)connecting: every
			// waiter reads its intent again.
			n.wake(nil, false)
		},
		Logger: n.client.logger,
		Name:   "intent waiter",
		NotifyFunc: func(payload string) {
			// Waits return on terminal states, and on an approval (see
			// Wait); other changes wake only watches.
			if state, ids, ok := intentdb.ParseChanged(payload); ok {
				n.wake(ids, !State(state).Terminal() && state != intentdb.ChangeApproved)
			}
		},
	})
}

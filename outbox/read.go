package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

// Get returns the intent (namespace, key), or ErrNotFound.
func (c *Client) Get(ctx context.Context, namespace, key string) (*Intent, error) {
	// One statement: the pool runs it in a transaction of its own.
	return c.GetTx(ctx, c.pool, namespace, key)
}

// GetTx returns the intent (namespace, key) as tx sees it, or ErrNotFound:
// an intent tx enqueued is found before tx commits, and a change tx made
// (CancelTx, ResolveTx, ApproveTx, DenyTx) is seen.
func (c *Client) GetTx(ctx context.Context, tx Executor, namespace, key string) (*Intent, error) {
	if namespace == "" {
		namespace = NamespaceDefault
	}
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	row, err := c.queries.Get(ctx, tx, namespace, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &Error{Code: CodeNotFound, Message: "no intent with this key"}
	}
	if err != nil {
		return nil, fmt.Errorf("error reading intent: %w", err)
	}
	return intentFromRow(row), nil
}

// GetByID returns the intent whose Intent.ID is id, in namespace: one
// look-up by primary key, for a caller that kept the id (an MCP task
// names its intent by it). It returns ErrNotFound when there is none, or
// when it belongs to another namespace.
func (c *Client) GetByID(ctx context.Context, namespace string, id int64) (*Intent, error) {
	if namespace == "" {
		namespace = NamespaceDefault
	}
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	row, err := c.queries.GetWhole(ctx, c.pool, namespace, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &Error{Code: CodeNotFound, Message: "no intent with this id"}
	}
	if err != nil {
		return nil, fmt.Errorf("error reading intent: %w", err)
	}
	return intentFromRow(row), nil
}

// ListLimitDefault and ListLimitMax bound List's page size.
const (
	ListLimitDefault = 100
	ListLimitMax     = 1000
)

// ListParams filters List.
type ListParams struct {
	// Cursor continues a previous listing (ListResult.NextCursor). Defaults
	// to the newest intents.
	Cursor string
	// Effect keeps only intents of this effect. Defaults to all.
	Effect string
	// Limit is the page size, at most ListLimitMax. Defaults to
	// ListLimitDefault.
	Limit int
	// Namespace is the tenant. Defaults to NamespaceDefault.
	Namespace string
	// States keeps only intents in these states. Defaults to all.
	States []State
}

// ListResult is a page of intents, newest first.
type ListResult struct {
	// Intents is the page.
	Intents []*Intent
	// NextCursor fetches the next page; empty on the last one.
	NextCursor string
}

// List returns intents of a namespace, newest first, a page at a time.
func (c *Client) List(ctx context.Context, params *ListParams) (*ListResult, error) {
	return c.ListTx(ctx, c.pool, params)
}

// ListTx is List as tx sees the intents: those tx enqueued or changed are
// listed as tx left them, before it commits.
func (c *Client) ListTx(ctx context.Context, tx Executor, params *ListParams) (*ListResult, error) {
	if params == nil {
		params = &ListParams{}
	}
	namespace := params.Namespace
	if namespace == "" {
		namespace = NamespaceDefault
	}
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	limit := params.Limit
	switch {
	case limit == 0:
		limit = ListLimitDefault
	case limit < 0 || limit > ListLimitMax:
		return nil, &Error{Code: CodeInvalidArgs, Field: "limit", Message: "must be between 1 and " + strconv.Itoa(ListLimitMax)}
	}
	states := make([]string, 0, len(params.States))
	for _, s := range params.States {
		if !s.Valid() {
			return nil, &Error{Code: CodeInvalidArgs, Field: "state", Message: fmt.Sprintf("unknown state %q", s)}
		}
		states = append(states, string(s))
	}
	var before int64
	if params.Cursor != "" {
		var ok bool
		if before, ok = intentdb.DecodeCursor(params.Cursor); !ok {
			return nil, &Error{Code: CodeInvalidArgs, Field: "cursor", Message: "is not a cursor returned by a listing"}
		}
	}

	// One row more than the page tells whether there is a next page.
	rows, err := c.queries.List(ctx, tx, &intentdb.ListParams{
		BeforeID: before, Effect: params.Effect, Limit: limit + 1, Namespace: namespace, States: states,
	})
	if err != nil {
		return nil, fmt.Errorf("error listing intents: %w", err)
	}
	res := &ListResult{Intents: make([]*Intent, 0, len(rows))}
	for _, row := range rows {
		res.Intents = append(res.Intents, intentFromRow(row))
	}
	if len(res.Intents) > limit {
		res.Intents = res.Intents[:limit]
		res.NextCursor = intentdb.EncodeCursor(res.Intents[limit-1].ID)
	}
	return res, nil
}

// Wait blocks until the intent (namespace, key) is terminal and returns it.
// Approval is the exception, since a person must act: Wait also returns when
// the intent enters awaiting_approval, and a wait that begins while it
// awaits approval returns when that ends (approved, so pending; or denied,
// expired or cancelled). It is woken by the notification each state change
// fires, on one LISTEN connection that all of the client's waits share, and
// never polls, unless the client cannot listen (Config.PollOnly without a
// SessionPool: it then reads every WaitPollInterval). When ctx ends first, it returns the intent as it last read
// it together with ctx's error.
func (c *Client) Wait(ctx context.Context, namespace, key string) (*Intent, error) {
	// Most waits are for intents that are already terminal.
	intent, err := c.Get(ctx, namespace, key)
	if err != nil || intent.State.Terminal() {
		return intent, err
	}
	awaiting := intent.State == StateAwaitingApproval
	done := func(i *Intent) bool {
		return i.State.Terminal() || (i.State == StateAwaitingApproval) != awaiting
	}

	if c.listenPool == nil {
		ticker := time.NewTicker(WaitPollInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ticker.C:
			case <-ctx.Done():
				return intent, ctx.Err()
			}
			if intent, err = c.reread(ctx, c.pool, intent); err != nil || done(intent) {
				return intent, err
			}
		}
	}
	sub, ready, unsubscribe := c.notifier.subscribe(intent.ID)
	defer unsubscribe()
	select {
	case <-ready:
	case <-ctx.Done():
		return intent, ctx.Err()
	}
	for {
		// Read again now that we listen (a change between the first read and
		// LISTEN would otherwise be missed), and after every wake-up.
		if intent, err = c.reread(ctx, c.pool, intent); err != nil || done(intent) {
			return intent, err
		}
		select {
		case <-sub.wake:
		case <-ctx.Done():
			return intent, ctx.Err()
		}
	}
}

// Watch signals on the returned channel whenever one of the intents ids
// may have changed state (any change, not only those Wait returns on): once
// as soon as the watch is in effect, so that a read after that signal
// misses nothing, then after every change, and after the shared LISTEN
// connection reconnected (a change may have been missed). Signals coalesce:
// a reader reads the intents again after each. The watch ends with ctx. It
// shares Wait's one LISTEN connection; a client that cannot listen
// (Config.PollOnly without a SessionPool) signals every WaitPollInterval
// instead.
func (c *Client) Watch(ctx context.Context, ids []int64) <-chan struct{} {
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if c.listenPool == nil {
		signal()
		go func() {
			ticker := time.NewTicker(WaitPollInterval)
			defer ticker.Stop()
			for {
				select {
				case <-ticker.C:
					signal()
				case <-ctx.Done():
					return
				}
			}
		}()
		return wake
	}
	sub := &subscription{wake: wake, every: true}
	ready, unsubscribe := c.notifier.add(sub, slices.Clone(ids))
	context.AfterFunc(ctx, unsubscribe)
	select {
	case <-ready:
		// Listening already: a change from now on is signalled.
		signal()
	default:
		// The listener signals every subscriber once LISTEN is in
		// effect.
	}
	return wake
}

// reread reads intent again. On failure it returns the intent as last read,
// with ctx's error when ctx ended, so that a waiter always has something to
// show.
func (c *Client) reread(ctx context.Context, q Executor, last *Intent) (*Intent, error) {
	intent, err := c.GetTx(ctx, q, last.Namespace, last.Key)
	if err != nil {
		if ctx.Err() != nil {
			return last, ctx.Err()
		}
		return last, err
	}
	return intent, nil
}

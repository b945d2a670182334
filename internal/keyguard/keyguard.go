// Package keyguard records agents' intents: the automatic key of a call that
// carries none, and the guard on a key that comes from a model (docs/agents.md,
// "Keys").
//
// A key supplied by a model is advice: a model asked to reuse a key sometimes
// invents a fresh one, and then a retry becomes a second action. So when a
// model's key is new, but the same action (effect, and arguments equal as
// canonical JSON, in the namespace) was recorded within the window under
// another key, the guard refuses it (ModeRefuse, with
// *outbox.PossibleDuplicateError naming the earlier key), or answers with the
// earlier intent (ModeReplay), unless the call confirms a new action. The
// MCP server's tools use it for every call; the HTTP API for calls that say
// their key is a model's (Idempotency-Key-Source: model).
//
// The check and the insert run in one transaction holding an advisory lock
// on (namespace, effect, canonical arguments), the lock the automatic key
// takes too, so that two concurrent re-emissions cannot both pass.
package keyguard

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/autokey"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/origin"
	"github.com/outbox-dev/outbox/outbox"
)

// Mode is what the guard does with a possible duplicate
// (OUTBOX_MODEL_KEY_GUARD).
type Mode string

const (
	// ModeRefuse answers possible_duplicate, naming the earlier key.
	ModeRefuse Mode = "refuse"
	// ModeReplay answers with the earlier intent, as a duplicate.
	ModeReplay Mode = "replay"
	// ModeOff takes a model's key as given.
	ModeOff Mode = "off"
)

// Defaults of Config.
const (
	// ModeDefault is Config.Mode's default.
	ModeDefault = ModeRefuse
	// WindowDefault is Config.Window's default, and the automatic key's
	// window (mcpserver.Config.AutoKeyWindow): one window, the guard's and
	// the key's.
	WindowDefault = 10 * time.Minute
)

// Outcomes of outbox_possible_duplicates_total{tool,outcome}.
const (
	OutcomeConfirmed = "confirmed"
	OutcomeRefused   = "refused"
	OutcomeReplayed  = "replayed"
)

// Config configures a Guard.
type Config struct {
	// Mode is what the guard does with a possible duplicate. Defaults to
	// ModeDefault.
	Mode Mode

	// ObserverFunc, when set, is called with the tool (or effect) and the
	// outcome of every possible duplicate the guard met. Defaults to nil.
	ObserverFunc func(tool, outcome string)

	// Window is how long after an action an identical one is taken for a
	// repeat: the automatic key's window, and the guard's. Defaults to
	// WindowDefault.
	Window time.Duration
}

// Guard records agents' intents.
type Guard struct {
	client   *outbox.Client
	mode     Mode
	observer func(tool, outcome string)
	pool     *pgxpool.Pool
	queries  *intentdb.Queries
	window   time.Duration
}

// New returns a Guard enqueueing through client on pool.
func New(pool *pgxpool.Pool, client *outbox.Client, config *Config) (*Guard, error) {
	if pool == nil || client == nil {
		return nil, errors.New("keyguard: pool and client must not be nil")
	}
	if config == nil {
		config = &Config{}
	}
	g := &Guard{client: client, mode: config.Mode, observer: config.ObserverFunc, pool: pool,
		queries: intentdb.New(client.Schema()), window: config.Window}
	if g.mode == "" {
		g.mode = ModeDefault
	}
	switch g.mode {
	case ModeRefuse, ModeReplay, ModeOff:
	default:
		return nil, fmt.Errorf("keyguard: Mode must be refuse, replay or off, not %q", g.mode)
	}
	if g.window == 0 {
		g.window = WindowDefault
	}
	if g.window < 0 {
		return nil, fmt.Errorf("keyguard: Window must be positive, not %s", g.window)
	}
	return g, nil
}

// Window returns the guard's window.
func (g *Guard) Window() time.Duration { return g.window }

// Params is one agent's call to record.
type Params struct {
	// Args are the effect's arguments, a JSON object.
	Args json.RawMessage
	// Effect is the effect's name.
	Effect string
	// Key is the call's key; empty for the automatic key.
	Key string
	// ModelKey says that Key came from a model: it is guarded.
	ModelKey bool
	// Namespace is the tenant.
	Namespace string
	// NewAction is the model's confirmation that an identical action
	// recorded moments before under another key is not this one.
	NewAction bool
	// EnqueuedBy is who enqueues, from the credentials
	// (outbox.EnqueueParams).
	EnqueuedBy string
	// RequestedBy optionally names who asked.
	RequestedBy string
	// RequireApproval asks for an operator's approval before it runs.
	RequireApproval bool
	// Tool names the call for the automatic key and the metrics: the MCP
	// tool, or the effect over HTTP.
	Tool string
}

// Result is an agent's recorded call.
type Result struct {
	*outbox.EnqueueResult
	// PossibleDuplicateOf is, in ModeReplay, the key of the earlier intent
	// the call was answered with.
	PossibleDuplicateOf string
}

// Enqueue records the call, under its own key or its automatic one, after the
// guard's check when its key is a model's.
func (g *Guard) Enqueue(ctx context.Context, p *Params) (*Result, error) {
	canonical, err := autokey.Canonicalize(p.Args)
	if err != nil {
		if p.Key != "" {
			// Arguments RFC 8785 cannot hold (a duplicate name, a number
			// beyond a double) cannot be compared: take the key as given,
			// and let the enqueue's own checks judge the arguments.
			res, err := g.client.Enqueue(withOrigin(ctx, p, outbox.KeySourceExplicit), g.params(p, p.Key))
			return &Result{EnqueueResult: res}, err
		}
		return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "args", Message: err.Error()}
	}
	sum := sha256.Sum256(canonical)
	return dbutil.WithTxV(ctx, g.pool, func(tx pgx.Tx) (*Result, error) {
		// The lock comes before the clock is read, so a call that waited
		// for it reads a time after the first call's commit.
		now, err := g.queries.LockAction(ctx, tx, autokey.LockID(p.Namespace, p.Effect, canonical))
		if err != nil {
			return nil, fmt.Errorf("error locking the action: %w", err)
		}
		key, source := p.Key, outbox.KeySourceExplicit
		if key == "" {
			var err error
			if key, err = g.autoKey(ctx, tx, p, canonical, now); err != nil {
				return nil, err
			}
			source = outbox.KeySourceAuto
		} else if p.ModelKey && g.mode != ModeOff {
			res, confirmed, err := g.check(ctx, tx, p, sum[:])
			if err != nil || res != nil {
				return res, err
			}
			if confirmed {
				source = outbox.KeySourceModelConfirmed
			}
		}
		res, err := g.client.EnqueueTx(withOrigin(ctx, p, source), tx, g.params(p, key))
		if err != nil {
			return nil, err
		}
		if !res.Duplicate {
			if err := g.queries.RecordAction(ctx, tx, p.Namespace, p.Effect, sum[:], key); err != nil {
				return nil, fmt.Errorf("error recording the action: %w", err)
			}
		}
		return &Result{EnqueueResult: res}, nil
	})
}

// check applies the guard to a model's key. It returns a result to answer
// with (ModeReplay), an error (ModeRefuse), or neither, with confirmed set
// when the call confirmed a new action that the guard would have stopped.
func (g *Guard) check(ctx context.Context, tx pgx.Tx, p *Params, sum []byte) (res *Result, confirmed bool, err error) {
	// A key already recorded is answered as always: a duplicate, or a
	// conflict.
	if _, err := g.queries.Get(ctx, tx, p.Namespace, p.Key); err == nil {
		return nil, false, nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("error reading the intent: %w", err)
	}
	recent, err := g.queries.GetRecentAction(ctx, tx, p.Namespace, p.Effect, sum)
	if err != nil {
		return nil, false, fmt.Errorf("error reading recent actions: %w", err)
	}
	if recent == nil || recent.Key == p.Key || recent.Age >= g.window {
		return nil, false, nil
	}
	if p.NewAction {
		g.observe(p.Tool, OutcomeConfirmed)
		return nil, true, nil
	}
	earlier, err := g.client.Get(ctx, p.Namespace, recent.Key)
	if errors.Is(err, outbox.ErrNotFound) {
		return nil, false, nil // pruned since: nothing to repeat
	}
	if err != nil {
		return nil, false, err
	}
	if g.mode == ModeReplay {
		g.observe(p.Tool, OutcomeReplayed)
		return &Result{EnqueueResult: &outbox.EnqueueResult{Duplicate: true, Intent: earlier}, PossibleDuplicateOf: earlier.Key}, false, nil
	}
	g.observe(p.Tool, OutcomeRefused)
	return nil, false, &outbox.PossibleDuplicateError{Earlier: earlier, Age: recent.Age}
}

// autoKey picks the automatic key of a call at now: the previous window's,
// if its intent is less than a window old, else the current window's. So
// identical calls within one window of the first are one action wherever
// the windows' boundaries fall, and a call one window or more after the
// first starts a new action. The clock is the database's, the same for
// every replica of serve.
func (g *Guard) autoKey(ctx context.Context, tx pgx.Tx, p *Params, canonical []byte, now time.Time) (string, error) {
	start := autokey.WindowStart(now, g.window)
	previous := autokey.Key(p.Tool, canonical, start.Add(-g.window))
	createdAt, err := g.queries.CreatedAt(ctx, tx, p.Namespace, previous)
	switch {
	case err == nil && now.Sub(createdAt) < g.window:
		return previous, nil
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("error reading the previous automatic key: %w", err)
	}
	return autokey.Key(p.Tool, canonical, start), nil
}

// withOrigin is ctx carrying who enqueues p and how its key was made, which
// the intent records.
func withOrigin(ctx context.Context, p *Params, source outbox.KeySource) context.Context {
	return origin.With(ctx, origin.Origin{EnqueuedBy: p.EnqueuedBy, KeySource: string(source)})
}

func (g *Guard) params(p *Params, key string) *outbox.EnqueueParams {
	return &outbox.EnqueueParams{
		Args:        p.Args,
		Effect:      p.Effect,
		Key:         key,
		Namespace:   p.Namespace,
		RequestedBy: p.RequestedBy,

		RequireApproval: p.RequireApproval,
	}
}

func (g *Guard) observe(tool, outcome string) {
	if g.observer != nil {
		g.observer(tool, outcome)
	}
}

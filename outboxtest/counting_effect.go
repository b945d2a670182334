package outboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/outbox-dev/outbox/effects"
)

// CountingEffectNameDefault is a CountingEffect's name when its config
// gives none.
const CountingEffectNameDefault = "counting"

// CountingEffectConfig configures a CountingEffect.
type CountingEffectConfig struct {
	// ExecuteFunc decides each execution's outcome, as a real effect's
	// Execute would: a result, or an error classified with effects.NotSent,
	// effects.Permanent or effects.Ambiguous. It is called after the
	// execution was counted, and without the effect's lock, so that it may
	// block until the test lets it go on. Defaults to succeeding with the
	// result {"execution": n}, n counting from 1.
	ExecuteFunc func(ctx context.Context, req *effects.Request) (json.RawMessage, error)

	// Guarantee is the effect's guarantee, which decides what the worker does
	// after an attempt whose outcome was lost (docs/effects.md). Defaults to
	// effects.GuaranteeDeduplicated.
	Guarantee effects.Guarantee

	// Name is the effect's name, as intents give it. Defaults to
	// CountingEffectNameDefault.
	Name string
}

// CountingEffect is a stand-in effect that records every execution, for
// tests that check how many times an intent's effect ran: once, however many
// times it was enqueued. It accepts any arguments. Register it in the
// effects.Registry given to the dispatcher (and the client).
//
// It implements effects.Reconciler, so that it may be registered as
// reconcilable: a look-up finds the provider key of an execution that
// succeeded.
type CountingEffect struct {
	execute   func(ctx context.Context, req *effects.Request) (json.RawMessage, error)
	guarantee effects.Guarantee
	name      string

	mu        sync.Mutex
	calls     []effects.Request
	succeeded map[string]json.RawMessage // provider key -> result
}

// The capabilities CountingEffect has: the build breaks if a method drifts from
// its interface.
var (
	_ effects.Effect     = (*CountingEffect)(nil)
	_ effects.Reconciler = (*CountingEffect)(nil)
)

// NewCountingEffect returns a CountingEffect. A nil config is the zero
// config. The name and guarantee are checked when the effect is registered.
func NewCountingEffect(config *CountingEffectConfig) *CountingEffect {
	if config == nil {
		config = &CountingEffectConfig{}
	}
	e := &CountingEffect{
		execute:   config.ExecuteFunc,
		guarantee: config.Guarantee,
		name:      config.Name,
		succeeded: map[string]json.RawMessage{},
	}
	if e.guarantee == "" {
		e.guarantee = effects.GuaranteeDeduplicated
	}
	if e.name == "" {
		e.name = CountingEffectNameDefault
	}
	return e
}

// Name returns the effect's name.
func (e *CountingEffect) Name() string { return e.name }

// Guarantee returns the effect's guarantee.
func (e *CountingEffect) Guarantee() effects.Guarantee { return e.guarantee }

// ValidateArgs accepts any arguments.
func (e *CountingEffect) ValidateArgs(json.RawMessage) error { return nil }

// Execute counts the execution, then returns ExecuteFunc's outcome.
func (e *CountingEffect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	e.mu.Lock()
	call := *req
	call.Args = slices.Clone(req.Args)
	e.calls = append(e.calls, call)
	n := len(e.calls)
	e.mu.Unlock()

	var result json.RawMessage
	var err error
	if e.execute != nil {
		result, err = e.execute(ctx, req)
	} else {
		result = json.RawMessage(fmt.Sprintf(`{"execution": %d}`, n))
	}
	if err == nil {
		e.mu.Lock()
		e.succeeded[req.ProviderKey] = result
		e.mu.Unlock()
	}
	return result, err
}

// Lookup reports whether an execution with providerKey succeeded, and its
// result.
func (e *CountingEffect) Lookup(_ context.Context, providerKey string) (json.RawMessage, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	result, ok := e.succeeded[providerKey]
	return result, ok, nil
}

// Count returns how many times Execute was called.
func (e *CountingEffect) Count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.calls)
}

// Calls returns the requests Execute was called with, in order.
func (e *CountingEffect) Calls() []effects.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

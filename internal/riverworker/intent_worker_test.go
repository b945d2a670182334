package riverworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/riverworker"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// testEffect is a provider stand-in whose behaviour each test scripts. It
// counts effects performed (acted) separately from calls received.
type testEffect struct {
	guarantee effects.Guarantee
	window    time.Duration

	mu       sync.Mutex
	calls    int
	acted    map[string]int // provider key -> effects performed
	execute  func(ctx context.Context, req *effects.Request, act func()) (json.RawMessage, error)
	lookups  int
	lookupFn func(providerKey string) (bool, error)
}

func (e *testEffect) Name() string                       { return "test" }
func (e *testEffect) Guarantee() effects.Guarantee       { return e.guarantee }
func (e *testEffect) ValidateArgs(json.RawMessage) error { return nil }
func (e *testEffect) DedupeWindow() time.Duration        { return e.window }
func (e *testEffect) act(providerKey string) func() {
	return func() { e.mu.Lock(); e.acted[providerKey]++; e.mu.Unlock() }
}
func (e *testEffect) count(providerKey string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.acted[providerKey]
}
func (e *testEffect) callCount() int   { e.mu.Lock(); defer e.mu.Unlock(); return e.calls }
func (e *testEffect) lookupCount() int { e.mu.Lock(); defer e.mu.Unlock(); return e.lookups }

func (e *testEffect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	e.mu.Lock()
	e.calls++
	e.mu.Unlock()
	if e.execute != nil {
		return e.execute(ctx, req, e.act(req.ProviderKey))
	}
	e.act(req.ProviderKey)()
	return json.RawMessage(`{"id":"obj_1"}`), nil
}

func (e *testEffect) Lookup(ctx context.Context, providerKey string) (json.RawMessage, bool, error) {
	e.mu.Lock()
	e.lookups++
	e.mu.Unlock()
	if e.lookupFn != nil {
		if found, err := e.lookupFn(providerKey); err != nil || !found {
			return nil, false, err
		}
	} else if e.count(providerKey) == 0 {
		return nil, false, nil
	}
	return json.RawMessage(`{"id":"obj_found"}`), true, nil
}

type testBundle struct {
	client  *outbox.Client
	effect  *testEffect
	metrics *workers.Metrics
	pool    *pgxpool.Pool
	schema  string
	worker  *riverworker.IntentWorker
}

type setupOpts struct {
	effectTimeout time.Duration
	maxAttempts   int
}

func setup(t *testing.T, guarantee effects.Guarantee, opts *setupOpts) *testBundle {
	t.Helper()
	if opts == nil {
		opts = &setupOpts{}
	}
	pool, schema := testdb.MigratedSchema(t)
	effect := &testEffect{guarantee: guarantee, window: time.Hour, acted: map[string]int{}}
	reg, err := effects.NewRegistry(effect)
	require.NoError(t, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
	require.NoError(t, err)
	metrics := workers.NewMetrics(nil)
	worker, err := riverworker.NewIntentWorker(pool, &riverworker.IntentWorkerConfig{
		EffectTimeout: cmpOr(opts.effectTimeout, 2*time.Second),
		Effects:       reg,
		MaxAttempts:   cmpOr(opts.maxAttempts, 5),
		Metrics:       metrics,
		Schema:        schema,
	})
	require.NoError(t, err)
	worker.Start()
	t.Cleanup(worker.Stop)
	return &testBundle{client: client, effect: effect, metrics: metrics, pool: pool, schema: schema, worker: worker}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (b *testBundle) enqueue(t *testing.T, key string) *outbox.Intent {
	t.Helper()
	res, err := b.client.EnqueueTx(context.Background(), b.pool, &outbox.EnqueueParams{Key: key, Effect: "test", Args: map[string]any{"k": key}})
	require.NoError(t, err)
	return res.Intent
}

// work runs one River attempt of the intent's job by hand, as River would.
func (b *testBundle) work(intent *outbox.Intent, riverAttempt int) error {
	job := &river.Job[workers.IntentArgs]{
		JobRow: &rivertype.JobRow{ID: intent.ID, Attempt: riverAttempt, MaxAttempts: b.worker.MaxAttempts(), Kind: workers.IntentArgs{}.Kind(), Queue: intent.Effect},
		Args:   workers.IntentArgs{IntentID: intent.ID},
	}
	return b.worker.Work(context.Background(), job)
}

func (b *testBundle) get(t *testing.T, key string) *outbox.Intent {
	t.Helper()
	i, err := b.client.Get(context.Background(), "", key)
	require.NoError(t, err)
	return i
}

// crashedMidAttempt writes the intent enqueue would, as a worker that
// claimed it and died would leave it: running, with a lease that has
// expired.
func (b *testBundle) crashedMidAttempt(t *testing.T, key string) *outbox.Intent {
	t.Helper()
	return b.intent(t, key, &testfactory.IntentOpts{
		Attempt:        testfactory.Ptr(1),
		LeaseExpiresAt: testfactory.Ptr(time.Now().Add(-time.Second)),
		State:          outbox.StateRunning,
	})
}

// intent writes the intent enqueue would, with opts' columns.
func (b *testBundle) intent(t *testing.T, key string, opts *testfactory.IntentOpts) *outbox.Intent {
	t.Helper()
	opts.Args, opts.Effect, opts.Key, opts.Schema = json.RawMessage(`{"k":"`+key+`"}`), "test", key, b.schema
	return testfactory.Intent(context.Background(), t, b.pool, opts)
}

// expireLease moves a running intent's lease into the past, as waiting it
// out would, without the wait: claims judge leases by the database's clock.
// An UPDATE rather than testfactory.Intent: the lease is the one a claim
// of the running test wrote.
func (b *testBundle) expireLease(t *testing.T, key string) {
	t.Helper()
	tag, err := b.pool.Exec(context.Background(), `UPDATE `+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+`
		SET lease_expires_at = now() - interval '1 millisecond' WHERE key = $1 AND state = 'running'`, key)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected(), "intent %s has no lease", key)
}

func TestIntentWorker(t *testing.T) {
	t.Parallel()

	for _, g := range []effects.Guarantee{effects.GuaranteeDeduplicated, effects.GuaranteeReconcilable, effects.GuaranteeAtMostOnce} {
		t.Run("Succeeds_"+string(g), func(t *testing.T) {
			t.Parallel()
			b := setup(t, g, nil)
			intent := b.enqueue(t, "k")
			require.NoError(t, b.work(intent, 1))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateSucceeded, got.State)
			require.JSONEq(t, `{"id":"obj_1"}`, string(got.Result))
			require.Equal(t, 1, got.Attempts)
			require.NotNil(t, got.CompletedAt)
			require.Equal(t, 1, b.effect.count(intent.ProviderKey))

			// A re-run job (River UI retry of a completed job, a rescue)
			// does nothing.
			require.NoError(t, b.work(intent, 2))
			require.Equal(t, 1, b.effect.callCount())
			require.Equal(t, got.UpdatedAt, b.get(t, "k").UpdatedAt)
		})
	}

	t.Run("ProviderKeyIsStableAcrossAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, effects.GuaranteeDeduplicated, nil)
		var keys []string
		var mu sync.Mutex
		b.effect.execute = func(ctx context.Context, req *effects.Request, act func()) (json.RawMessage, error) {
			mu.Lock()
			keys = append(keys, req.ProviderKey)
			mu.Unlock()
			if req.Attempt < 3 {
				return nil, effects.NotSent("rate_limited", errors.New("429"))
			}
			act()
			return json.RawMessage(`{}`), nil
		}
		intent := b.enqueue(t, "k")
		for attempt := 1; attempt <= 3; attempt++ {
			_ = b.work(intent, attempt)
		}
		require.Equal(t, []string{intent.ProviderKey, intent.ProviderKey, intent.ProviderKey}, keys)
		require.Equal(t, outbox.StateSucceeded, b.get(t, "k").State)
	})

	// A provider's Retry-After is honoured: the job snoozes that long
	// (capped), which River does not count as an attempt, and the attempt
	// recorded is rewound with River's counter, so that an attempt that dies
	// after the snooze is still seen as lost.
	t.Run("RetryAfterSnoozes", func(t *testing.T) {
		t.Parallel()
		for _, g := range []effects.Guarantee{effects.GuaranteeDeduplicated, effects.GuaranteeAtMostOnce} {
			b := setup(t, g, &setupOpts{maxAttempts: 2})
			wait := 45 * time.Second
			b.effect.execute = func(_ context.Context, req *effects.Request, act func()) (json.RawMessage, error) {
				if req.Attempt == 1 {
					return nil, effects.NotSentRetryAfter("rate_limited", errors.New("429 Too Many Requests"), wait)
				}
				act()
				return json.RawMessage(`{}`), nil
			}
			intent := b.enqueue(t, "k")
			var snooze *river.JobSnoozeError
			require.ErrorAs(t, b.work(intent, 1), &snooze, g)
			require.Equal(t, wait, snooze.Duration)
			got := b.get(t, "k")
			require.Equal(t, outbox.StatePending, got.State)
			require.Equal(t, "rate_limited", got.Error.Code)
			var jobAttempt int
			require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT job_attempt FROM `+
				pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+` WHERE key = 'k'`).Scan(&jobAttempt))
			require.Equal(t, 0, jobAttempt, "River rewinds the job to attempt 0")

			// River runs the job again as attempt 1; with maxAttempts 2 it
			// is not the last, although the outbox counts two attempts.
			require.NoError(t, b.work(intent, 1), g)
			got = b.get(t, "k")
			require.Equal(t, outbox.StateSucceeded, got.State, g)
			require.Equal(t, 1, b.effect.count(intent.ProviderKey))
		}

		// An attempt that dies after the snooze is seen as lost.
		b := setup(t, effects.GuaranteeDeduplicated, &setupOpts{maxAttempts: 5})
		b.effect.execute = func(context.Context, *effects.Request, func()) (json.RawMessage, error) {
			return nil, effects.NotSentRetryAfter("rate_limited", errors.New("429"), time.Hour)
		}
		intent := b.enqueue(t, "k")
		var snooze *river.JobSnoozeError
		require.ErrorAs(t, b.work(intent, 1), &snooze)
		require.Equal(t, riverworker.RetryAfterMax, snooze.Duration, "capped")
		// River's attempt 1 again dies mid-call (never recorded); River
		// rescues the job as attempt 2.
		b.effect.execute = nil
		require.NoError(t, b.work(intent, 2))
		got := b.get(t, "k")
		require.Equal(t, outbox.StateSucceeded, got.State)
		require.Equal(t, 3, got.Attempts, "the snoozed attempt, the lost one, and this one")
	})

	t.Run("NotSentIsRetriedThenExhaustedFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, effects.GuaranteeAtMostOnce, &setupOpts{maxAttempts: 3})
		b.effect.execute = func(context.Context, *effects.Request, func()) (json.RawMessage, error) {
			return nil, effects.NotSent("service_unavailable", errors.New("503 before processing"))
		}
		intent := b.enqueue(t, "k")
		for attempt := 1; attempt <= 2; attempt++ {
			require.Error(t, b.work(intent, attempt), "not sent: River must retry")
			got := b.get(t, "k")
			require.Equal(t, outbox.StatePending, got.State)
			require.Equal(t, "service_unavailable", got.Error.Code)
		}
		require.NoError(t, b.work(intent, 3))
		got := b.get(t, "k")
		require.Equal(t, outbox.StateFailed, got.State, "nothing can have been sent")
		require.Equal(t, "attempts_exhausted", got.Error.Code)
		require.Equal(t, 3, b.effect.callCount())
	})

	t.Run("PermanentFailsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, effects.GuaranteeDeduplicated, nil)
		b.effect.execute = func(context.Context, *effects.Request, func()) (json.RawMessage, error) {
			return nil, effects.Permanent("card_declined", errors.New("402 card_declined"))
		}
		intent := b.enqueue(t, "k")
		require.NoError(t, b.work(intent, 1), "permanent: River must not retry")
		got := b.get(t, "k")
		require.Equal(t, outbox.StateFailed, got.State)
		require.Equal(t, "card_declined", got.Error.Code)
		// The failure is replayed to a duplicate.
		res, err := b.client.EnqueueTx(context.Background(), b.pool, &outbox.EnqueueParams{Key: "k", Effect: "test", Args: map[string]any{"k": "k"}})
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, outbox.StateFailed, res.Intent.State)
		require.Equal(t, "card_declined", res.Intent.Error.Code)
	})

	t.Run("UnclassifiedErrorIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		b := setup(t, effects.GuaranteeAtMostOnce, nil)
		b.effect.execute = func(context.Context, *effects.Request, func()) (json.RawMessage, error) {
			return nil, errors.New("something odd")
		}
		intent := b.enqueue(t, "k")
		require.NoError(t, b.work(intent, 1))
		require.Equal(t, outbox.StateUnknown, b.get(t, "k").State)
	})

	t.Run("AmbiguousPerGuarantee", func(t *testing.T) {
		t.Parallel()
		ambiguousOnce := func(ctx context.Context, req *effects.Request, act func()) (json.RawMessage, error) {
			act()
			if req.Attempt == 1 {
				return nil, effects.Ambiguous("connection_reset", errors.New("reset after the provider acted"))
			}
			return json.RawMessage(`{"id":"obj_1"}`), nil
		}

		t.Run("DeduplicatedRetriesWithTheSameKey", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeDeduplicated, nil)
			var keys []string
			b.effect.execute = func(ctx context.Context, req *effects.Request, act func()) (json.RawMessage, error) {
				keys = append(keys, req.ProviderKey)
				// A deduplicating provider acts once per key.
				if b.effect.count(req.ProviderKey) == 0 {
					act()
				}
				if req.Attempt == 1 {
					return nil, effects.Ambiguous("server_error", errors.New("500"))
				}
				return json.RawMessage(`{"id":"obj_1"}`), nil
			}
			intent := b.enqueue(t, "k")
			require.Error(t, b.work(intent, 1))
			got := b.get(t, "k")
			require.Equal(t, outbox.StatePending, got.State)
			require.True(t, got.MaybeSent)
			_, err := b.client.Cancel(context.Background(), &outbox.CancelParams{Key: "k"})
			require.ErrorIs(t, err, outbox.ErrNotCancellable, "an ambiguous attempt may have charged")
			require.NoError(t, b.work(intent, 2))
			require.Equal(t, outbox.StateSucceeded, b.get(t, "k").State)
			require.Equal(t, 1, b.effect.count(intent.ProviderKey))
			// Both attempts sent the intent's one provider key.
			require.Equal(t, []string{intent.ProviderKey, intent.ProviderKey}, keys)
		})

		t.Run("DeduplicatedExhaustedIsUnknown", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeDeduplicated, &setupOpts{maxAttempts: 2})
			b.effect.execute = func(context.Context, *effects.Request, func()) (json.RawMessage, error) {
				// Stripe replays a stored 500 to every retry with the key.
				return nil, effects.Ambiguous("server_error", errors.New("500"))
			}
			intent := b.enqueue(t, "k")
			require.Error(t, b.work(intent, 1))
			require.NoError(t, b.work(intent, 2))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateUnknown, got.State, "one attempt may have reached the provider")
		})

		t.Run("ReconcilableLooksUpAfterTheLease", func(t *testing.T) {
			t.Parallel()
			// A second's timeout (a two-second lease): it also bounds the
			// batched statements, which a loaded database may need.
			b := setup(t, effects.GuaranteeReconcilable, &setupOpts{effectTimeout: time.Second})
			b.effect.execute = ambiguousOnce
			intent := b.enqueue(t, "k")
			require.Error(t, b.work(intent, 1))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateRunning, got.State, "the lease is kept: the request may be in flight")

			// Before the lease ends, another attempt snoozes.
			err := b.work(intent, 2)
			var snooze *river.JobSnoozeError
			require.ErrorAs(t, err, &snooze)
			require.Zero(t, b.effect.lookupCount())

			b.expireLease(t, "k")
			require.NoError(t, b.work(intent, 2))
			got = b.get(t, "k")
			require.Equal(t, outbox.StateSucceeded, got.State)
			require.JSONEq(t, `{"id":"obj_found"}`, string(got.Result), "found by look-up, not sent again")
			require.Equal(t, 1, b.effect.callCount())
			require.Equal(t, 1, b.effect.count(intent.ProviderKey))
		})

		t.Run("AtMostOnceIsUnknownAtOnce", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeAtMostOnce, nil)
			b.effect.execute = ambiguousOnce
			intent := b.enqueue(t, "k")
			require.NoError(t, b.work(intent, 1), "unknown is final for workers")
			got := b.get(t, "k")
			require.Equal(t, outbox.StateUnknown, got.State)
			require.Equal(t, "connection_reset", got.Error.Code)
			require.NoError(t, b.work(intent, 2))
			require.Equal(t, 1, b.effect.callCount(), "never sent again without an operator")

			// The operator retries, knowingly.
			_, err := b.client.Resolve(context.Background(), &outbox.ResolveParams{Key: "k", Outcome: outbox.OutcomeRetry})
			require.NoError(t, err)
			require.NoError(t, b.work(intent, 1))
			require.Equal(t, outbox.StateSucceeded, b.get(t, "k").State)
			require.Equal(t, 2, b.effect.callCount())
		})
	})

	t.Run("LostOutcomePerGuarantee", func(t *testing.T) {
		t.Parallel()

		t.Run("AtMostOnceUnknown", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeAtMostOnce, nil)
			intent := b.crashedMidAttempt(t, "k")
			require.NoError(t, b.work(intent, 2))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateUnknown, got.State)
			require.Equal(t, "outcome_lost", got.Error.Code)
			require.Zero(t, b.effect.callCount())
			require.Equal(t, 2, got.Attempts)
		})

		t.Run("AtMostOncePendingButMaybeSentUnknown", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeAtMostOnce, nil)
			intent := b.intent(t, "k", &testfactory.IntentOpts{MaybeSent: testfactory.Ptr(true)})
			require.NoError(t, b.work(intent, 1))
			require.Equal(t, outbox.StateUnknown, b.get(t, "k").State)
			require.Zero(t, b.effect.callCount())
		})

		t.Run("DeduplicatedRetries", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeDeduplicated, nil)
			intent := b.crashedMidAttempt(t, "k")
			require.NoError(t, b.work(intent, 2))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateSucceeded, got.State)
			require.True(t, got.MaybeSent)
			require.Equal(t, 1, b.effect.callCount())
		})

		t.Run("DeduplicatedDiedAttemptSeenByJobAttempt", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeDeduplicated, nil)
			intent := b.enqueue(t, "k")
			// River attempt 1 died without recording anything; attempt 2
			// runs.
			require.NoError(t, b.work(intent, 2))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateSucceeded, got.State)
			require.True(t, got.MaybeSent)

			other := b.intent(t, "old", &testfactory.IntentOpts{CreatedAt: testfactory.Ptr(time.Now().Add(-2 * time.Hour))})
			require.NoError(t, b.work(other, 2))
			got = b.get(t, "old")
			require.Equal(t, outbox.StateUnknown, got.State)
			require.Equal(t, "dedupe_window_passed", got.Error.Code)
			require.Equal(t, 1, b.effect.callCount())
		})

		t.Run("DeduplicatedPastWindowUnknown", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeDeduplicated, nil)
			intent := b.intent(t, "k", &testfactory.IntentOpts{
				Attempt:        testfactory.Ptr(1),
				CreatedAt:      testfactory.Ptr(time.Now().Add(-2 * time.Hour)),
				LeaseExpiresAt: testfactory.Ptr(time.Now().Add(-time.Second)),
				State:          outbox.StateRunning,
			})
			require.NoError(t, b.work(intent, 2))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateUnknown, got.State)
			require.Equal(t, "dedupe_window_passed", got.Error.Code)
			require.Zero(t, b.effect.callCount(), "a reused key past the window would act again")
		})

		// The window is judged on the database's clock, with a margin
		// before it ends (an hour's window: 2.5 minutes).
		t.Run("DeduplicatedWithinTheMarginIsUnknown", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeDeduplicated, nil)
			intent := b.intent(t, "k", &testfactory.IntentOpts{
				Attempt:        testfactory.Ptr(1),
				CreatedAt:      testfactory.Ptr(time.Now().Add(-58 * time.Minute)),
				LeaseExpiresAt: testfactory.Ptr(time.Now().Add(-time.Second)),
				State:          outbox.StateRunning,
			})
			require.NoError(t, b.work(intent, 2))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateUnknown, got.State)
			require.Equal(t, "dedupe_window_passed", got.Error.Code)
			require.Zero(t, b.effect.callCount())
		})

		t.Run("DeduplicatedOldButNeverSentIsSent", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeDeduplicated, nil)
			intent := b.intent(t, "k", &testfactory.IntentOpts{CreatedAt: testfactory.Ptr(time.Now().Add(-2 * time.Hour))})
			require.NoError(t, b.work(intent, 1))
			require.Equal(t, outbox.StateSucceeded, b.get(t, "k").State)
		})

		t.Run("ReconcilableFound", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeReconcilable, nil)
			intent := b.crashedMidAttempt(t, "k")
			// The lost attempt did act at the provider.
			b.effect.act(intent.ProviderKey)()
			require.NoError(t, b.work(intent, 2))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateSucceeded, got.State)
			require.JSONEq(t, `{"id":"obj_found"}`, string(got.Result))
			require.Zero(t, b.effect.callCount())
			require.Equal(t, 1, b.effect.count(intent.ProviderKey))
		})

		t.Run("ReconcilableNotFoundSendsAgain", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeReconcilable, nil)
			intent := b.crashedMidAttempt(t, "k")
			require.NoError(t, b.work(intent, 2))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateSucceeded, got.State)
			require.Equal(t, 1, b.effect.lookupCount())
			require.Equal(t, 1, b.effect.count(intent.ProviderKey))
		})

		t.Run("ReconcilableLookupErrorRetries", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeReconcilable, nil)
			var fail atomic.Bool
			fail.Store(true)
			b.effect.lookupFn = func(string) (bool, error) {
				if fail.Load() {
					return false, errors.New("zendesk down")
				}
				return false, nil
			}
			intent := b.crashedMidAttempt(t, "k")
			require.Error(t, b.work(intent, 2))
			require.Equal(t, outbox.StateRunning, b.get(t, "k").State)
			fail.Store(false)
			// The failed look-up released the lease: the next attempt looks
			// up again at once.
			require.NoError(t, b.work(intent, 3))
			require.Equal(t, outbox.StateSucceeded, b.get(t, "k").State)
			require.Equal(t, 2, b.effect.lookupCount())
			require.Equal(t, 1, b.effect.callCount())
		})

		t.Run("ExhaustedAfterCrashOnLastAttempt", func(t *testing.T) {
			t.Parallel()
			b := setup(t, effects.GuaranteeDeduplicated, &setupOpts{maxAttempts: 2})
			intent := b.crashedMidAttempt(t, "k")
			// River gives the job MaxAttemptsMargin more attempts than the
			// outbox's limit, so the worker decides exhaustion itself.
			require.Greater(t, b.worker.MaxAttempts(), 2)
			require.NoError(t, b.work(intent, 3))
			got := b.get(t, "k")
			require.Equal(t, outbox.StateUnknown, got.State)
			require.Equal(t, "attempts_exhausted", got.Error.Code)
			require.Zero(t, b.effect.callCount())
		})
	})

	t.Run("LiveLeaseSnoozes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, effects.GuaranteeAtMostOnce, nil)
		intent := b.intent(t, "k", &testfactory.IntentOpts{
			Attempt:        testfactory.Ptr(1),
			LeaseExpiresAt: testfactory.Ptr(time.Now().Add(time.Minute)),
			State:          outbox.StateRunning,
		})
		err := b.work(intent, 2)
		var snooze *river.JobSnoozeError
		require.ErrorAs(t, err, &snooze)
		require.Greater(t, snooze.Duration, 50*time.Second)
		require.Zero(t, b.effect.callCount())
	})

	t.Run("CancelledIntentIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, effects.GuaranteeAtMostOnce, nil)
		intent := b.enqueue(t, "k")
		_, err := b.client.Cancel(context.Background(), &outbox.CancelParams{Key: "k"})
		require.NoError(t, err)
		require.NoError(t, b.work(intent, 1))
		require.Zero(t, b.effect.callCount())
		require.Equal(t, outbox.StateCancelled, b.get(t, "k").State)
	})
}

// A worker paused past its lease is overtaken by another attempt; when it
// comes back, its write is rejected and counted (in-process).
func TestIntentWorkerStaleAttempt(t *testing.T) {
	t.Parallel()
	for _, g := range []effects.Guarantee{effects.GuaranteeDeduplicated, effects.GuaranteeReconcilable, effects.GuaranteeAtMostOnce} {
		t.Run(string(g), func(t *testing.T) {
			t.Parallel()
			b := setup(t, g, &setupOpts{effectTimeout: time.Second})
			paused := make(chan struct{})
			resume := make(chan struct{})
			var calls atomic.Int32
			b.effect.execute = func(ctx context.Context, req *effects.Request, act func()) (json.RawMessage, error) {
				if calls.Add(1) == 1 {
					close(paused)
					<-resume // paused: ignores its deadline like a SIGSTOPped process
					return json.RawMessage(`{"id":"stale"}`), nil
				}
				act()
				return json.RawMessage(`{"id":"fresh"}`), nil
			}
			intent := b.enqueue(t, "k")
			staleDone := make(chan error, 1)
			go func() { staleDone <- b.work(intent, 1) }()
			<-paused

			// The lease runs out, then a rescued attempt takes over. A
			// deduplicated intent is not claimed, so it has no lease: River's
			// rescue alone decides when the next attempt runs.
			got := b.get(t, "k")
			if g == effects.GuaranteeDeduplicated {
				require.Equal(t, outbox.StatePending, got.State)
				require.Nil(t, got.LeaseExpiresAt)
			} else {
				require.Equal(t, outbox.StateRunning, got.State)
				b.expireLease(t, "k")
			}
			require.NoError(t, b.work(intent, 2))
			taken := b.get(t, "k")
			require.True(t, taken.MaybeSent, "the overtaken attempt may have acted")

			close(resume)
			// The stale attempt must not complete the job: River retries
			// it, and the retry finds the intent terminal.
			var stale *riverworker.StaleAttemptError
			require.ErrorAs(t, <-staleDone, &stale)
			require.NoError(t, b.work(intent, 3))
			require.Equal(t, 1.0, testutil.ToFloat64(b.metrics.StaleWrites))
			final := b.get(t, "k")
			require.Equal(t, taken.State, final.State)
			require.Equal(t, taken.UpdatedAt, final.UpdatedAt, "the stale write changed nothing")
			require.NotContains(t, string(final.Result), "stale")

			switch g {
			case effects.GuaranteeAtMostOnce:
				// The take-over cannot know what the paused one did.
				require.Equal(t, outbox.StateUnknown, final.State)
				require.Zero(t, b.effect.count(intent.ProviderKey))
			default:
				// The paused attempt never acts; the one that took over
				// does, once.
				require.Equal(t, outbox.StateSucceeded, final.State)
				require.Equal(t, 1, b.effect.count(intent.ProviderKey))
			}
		})
	}
}

func TestIntentWorkerBatchesConcurrentAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, effects.GuaranteeDeduplicated, nil)
	const n = 200
	intents := make([]*outbox.Intent, n)
	for i := range intents {
		intents[i] = b.enqueue(t, fmt.Sprintf("k%d", i))
	}
	var wg sync.WaitGroup
	for _, intent := range intents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.work(intent, 1); err != nil {
				t.Errorf("work: %v", err)
			}
		}()
	}
	wg.Wait()
	var succeeded, statements int
	// Every row a statement writes gets that statement's now(): distinct
	// finish times count the finish statements.
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT completed_at) FROM `+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+
		` WHERE state = 'succeeded' AND attempt = 1`).Scan(&succeeded, &statements))
	require.Equal(t, n, succeeded)
	t.Logf("%d concurrent finishes in %d statements", n, statements)
	require.Less(t, statements, n/2, "finishes were not batched")
}

// argsEffect's guarantee depends on its args, like a webhook's endpoint.
type argsEffect struct{ testEffect }

func (e *argsEffect) GuaranteeFor(args json.RawMessage) effects.Guarantee {
	var a struct {
		Dedupe bool `json:"dedupe"`
	}
	_ = json.Unmarshal(args, &a)
	if a.Dedupe {
		return effects.GuaranteeDeduplicated
	}
	return effects.GuaranteeAtMostOnce
}

func TestIntentWorkerGuaranteeFromArgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testdb.MigratedSchema(t)
	effect := &argsEffect{testEffect{guarantee: effects.GuaranteeAtMostOnce, window: time.Hour, acted: map[string]int{}}}
	reg, err := effects.NewRegistry(effect)
	require.NoError(t, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
	require.NoError(t, err)
	worker, err := riverworker.NewIntentWorker(pool, &riverworker.IntentWorkerConfig{Effects: reg, Schema: schema})
	require.NoError(t, err)
	worker.Start()
	defer worker.Stop()

	seen := map[string]outbox.State{}
	effect.execute = func(ctx context.Context, req *effects.Request, act func()) (json.RawMessage, error) {
		// What the intent looks like while the provider is being called.
		var key string
		require.NoError(t, pool.QueryRow(ctx, `SELECT key FROM `+pgx.Identifier{schema, "outbox_intent"}.Sanitize()+` WHERE id = $1`, req.IntentID).Scan(&key))
		got, err := client.Get(ctx, "", key)
		require.NoError(t, err)
		seen[key] = got.State
		act()
		return nil, effects.Ambiguous("reset", errors.New("reset after acting"))
	}
	for _, tc := range []struct {
		key    string
		dedupe bool
	}{{"dedupe", true}, {"plain", false}} {
		res, err := client.EnqueueTx(ctx, pool, &outbox.EnqueueParams{Key: tc.key, Effect: "test", Args: map[string]any{"dedupe": tc.dedupe}})
		require.NoError(t, err)
		job := &river.Job[workers.IntentArgs]{
			JobRow: &rivertype.JobRow{ID: res.Intent.ID, Attempt: 1, Queue: "test"},
			Args:   workers.IntentArgs{IntentID: res.Intent.ID},
		}
		_ = worker.Work(ctx, job)
	}
	// Deduplicated for its args: not claimed, and retried after the
	// ambiguous answer. At most once for its args: claimed, then unknown.
	require.Equal(t, outbox.StatePending, seen["dedupe"])
	require.Equal(t, outbox.StateRunning, seen["plain"])
	got, err := client.Get(ctx, "", "dedupe")
	require.NoError(t, err)
	require.Equal(t, outbox.StatePending, got.State)
	got, err = client.Get(ctx, "", "plain")
	require.NoError(t, err)
	require.Equal(t, outbox.StateUnknown, got.State)
}

// declaredTestEffect is a testEffect whose request is declared
// (effects.Declarer): decl names the declaration in force.
type declaredTestEffect struct {
	*testEffect
	decl string
}

func (e *declaredTestEffect) DeclarationSHA256() string { return e.decl }

// An intent that may have been sent under one declaration of its effect is
// never sent again under another: a reconcilable one is looked up first
// (found ends succeeded), any other ends unknown (declaration_changed). The same intent under an unchanged
// declaration goes on as usual.
func TestIntentWorkerDeclarationChanged(t *testing.T) {
	t.Parallel()

	run := func(t *testing.T, guarantee effects.Guarantee, change bool) (*outbox.Intent, *declaredTestEffect) {
		t.Helper()
		pool, schema := testdb.MigratedSchema(t)
		effect := &declaredTestEffect{testEffect: &testEffect{guarantee: guarantee, window: time.Hour, acted: map[string]int{}}, decl: "sha-a"}
		reg, err := effects.NewRegistry(effect)
		require.NoError(t, err)
		client, err := outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
		require.NoError(t, err)
		worker, err := riverworker.NewIntentWorker(pool, &riverworker.IntentWorkerConfig{EffectTimeout: time.Second, Effects: reg, Schema: schema})
		require.NoError(t, err)
		worker.Start()
		t.Cleanup(worker.Stop)
		b := &testBundle{client: client, effect: effect.testEffect, pool: pool, schema: schema, worker: worker}
		// The provider acts every time; the first answer is lost.
		effect.execute = func(ctx context.Context, req *effects.Request, act func()) (json.RawMessage, error) {
			act()
			if req.Attempt == 1 {
				return nil, effects.Ambiguous("connection_reset", errors.New("reset after the provider acted"))
			}
			return json.RawMessage(`{"id":"obj_1"}`), nil
		}
		intent := b.enqueue(t, "k")
		require.Error(t, b.work(intent, 1), "ambiguous: retried")
		got := b.get(t, "k")
		if got.LeaseExpiresAt != nil {
			b.expireLease(t, "k")
		}
		if change {
			effect.decl = "sha-b"
		}
		_ = b.work(intent, 2)
		return b.get(t, "k"), effect
	}
	for _, g := range []effects.Guarantee{effects.GuaranteeDeduplicated, effects.GuaranteeReconcilable} {
		t.Run(string(g)+"/Changed", func(t *testing.T) {
			t.Parallel()
			got, effect := run(t, g, true)
			require.Equal(t, 1, effect.callCount(), "not sent again")
			if g == effects.GuaranteeReconcilable {
				// A look-up can still tell: the earlier request acted.
				require.Equal(t, outbox.StateSucceeded, got.State)
				require.Equal(t, 1, effect.lookupCount(), "looked up before anything else")
				return
			}
			require.Equal(t, outbox.StateUnknown, got.State)
			require.Equal(t, "declaration_changed", got.Error.Code)
		})
		t.Run(string(g)+"/Unchanged", func(t *testing.T) {
			t.Parallel()
			got, effect := run(t, g, false)
			require.Equal(t, outbox.StateSucceeded, got.State)
			if g == effects.GuaranteeReconcilable {
				require.Equal(t, 1, effect.callCount(), "found by the look-up")
				require.Equal(t, 1, effect.lookupCount())
			} else {
				require.Equal(t, 2, effect.callCount(), "sent again under the same key, which the provider dedupes")
			}
		})
	}
}

// reservingEffect is an always-claimed testEffect that reserves what its
// attempt needs (as an MCP upstream tool takes a slot and a session), and
// records the intent's state when it does.
type reservingEffect struct {
	*testEffect
	pool     *pgxpool.Pool
	schema   string
	mu       sync.Mutex
	seen     []string
	released int
}

type reservedKey struct{}

func (e *reservingEffect) AlwaysClaim() bool { return true }

func (e *reservingEffect) Reserve(ctx context.Context) (context.Context, func()) {
	var state string
	_ = e.pool.QueryRow(ctx, `SELECT state FROM `+pgx.Identifier{e.schema, "outbox_intent"}.Sanitize()+` LIMIT 1`).Scan(&state)
	e.mu.Lock()
	e.seen = append(e.seen, state)
	e.mu.Unlock()
	return context.WithValue(ctx, reservedKey{}, true), func() {
		e.mu.Lock()
		e.released++
		e.mu.Unlock()
	}
}

// What an attempt needs of its provider is reserved before the claim: a
// crash or a long wait while reserving leaves the intent pending, with
// nothing claimed; the call runs under the reservation, which is released
// after the attempt.
func TestIntentWorkerReservesBeforeClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testdb.MigratedSchema(t)
	effect := &reservingEffect{testEffect: &testEffect{guarantee: effects.GuaranteeAtMostOnce, acted: map[string]int{}}, pool: pool, schema: schema}
	var reservedInCall atomic.Bool
	effect.execute = func(ctx context.Context, _ *effects.Request, act func()) (json.RawMessage, error) {
		reservedInCall.Store(ctx.Value(reservedKey{}) != nil)
		act()
		return json.RawMessage(`{}`), nil
	}
	reg, err := effects.NewRegistry(effect)
	require.NoError(t, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
	require.NoError(t, err)
	worker, err := riverworker.NewIntentWorker(pool, &riverworker.IntentWorkerConfig{Effects: reg, Schema: schema})
	require.NoError(t, err)
	worker.Start()
	defer worker.Stop()

	res, err := client.EnqueueTx(ctx, pool, &outbox.EnqueueParams{Key: "r", Effect: "test", Args: map[string]any{}})
	require.NoError(t, err)
	job := &river.Job[workers.IntentArgs]{
		JobRow: &rivertype.JobRow{ID: res.Intent.ID, Attempt: 1, Queue: "test"},
		Args:   workers.IntentArgs{IntentID: res.Intent.ID},
	}
	require.NoError(t, worker.Work(ctx, job))
	effect.mu.Lock()
	defer effect.mu.Unlock()
	require.Equal(t, []string{"pending"}, effect.seen, "reserved before the claim")
	require.True(t, reservedInCall.Load(), "the call runs under the reservation")
	require.Equal(t, 1, effect.released)
	got, err := client.Get(ctx, "", "r")
	require.NoError(t, err)
	require.Equal(t, outbox.StateSucceeded, got.State)
}

// sentArgsEffect is an always-claimed testEffect whose provider receives
// other arguments than the intent's, which it records before its call (as
// an MCP upstream tool applies its marker and key_arg).
type sentArgsEffect struct{ *testEffect }

func (e *sentArgsEffect) AlwaysClaim() bool     { return true }
func (e *sentArgsEffect) RecordsSentArgs() bool { return true }

var _ effects.SentArgsRecorder = (*sentArgsEffect)(nil)

// An attempt's sent arguments are on the intent before its call, and stay
// there when its outcome is lost (the intent ends unknown): what an
// operator resolving it reads. A stale attempt cannot record them.
func TestIntentWorkerRecordsSentArgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testdb.MigratedSchema(t)
	effect := &sentArgsEffect{testEffect: &testEffect{guarantee: effects.GuaranteeAtMostOnce, acted: map[string]int{}}}
	queries := intentdb.New(schema)
	var (
		before    *intentdb.SentArgs
		staleErr  error
		beforeErr error
	)
	effect.execute = func(ctx context.Context, req *effects.Request, act func()) (json.RawMessage, error) {
		if req.RecordSentFunc == nil {
			return nil, errors.New("no RecordSentFunc")
		}
		if err := req.RecordSentFunc(ctx, json.RawMessage(`{"k":"`+req.ProviderKey+`","marker":"<!-- outbox -->"}`)); err != nil {
			return nil, err
		}
		before, beforeErr = queries.SentArgsOf(ctx, pool, req.IntentID)
		staleErr = queries.SetSentArgs(ctx, pool, req.IntentID, req.Attempt+1, json.RawMessage(`{}`))
		act()
		return nil, effects.Ambiguous("connection_lost", errors.New("the answer was lost"))
	}
	reg, err := effects.NewRegistry(effect)
	require.NoError(t, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
	require.NoError(t, err)
	worker, err := riverworker.NewIntentWorker(pool, &riverworker.IntentWorkerConfig{Effects: reg, Schema: schema})
	require.NoError(t, err)
	worker.Start()
	defer worker.Stop()

	res, err := client.EnqueueTx(ctx, pool, &outbox.EnqueueParams{Key: "sent", Effect: "test", Args: map[string]any{"k": "caller's"}})
	require.NoError(t, err)
	job := &river.Job[workers.IntentArgs]{
		JobRow: &rivertype.JobRow{ID: res.Intent.ID, Attempt: 1, MaxAttempts: worker.MaxAttempts(), Queue: "test"},
		Args:   workers.IntentArgs{IntentID: res.Intent.ID},
	}
	_ = worker.Work(ctx, job)
	require.NoError(t, beforeErr)
	require.NotNil(t, before, "recorded before the call")
	require.Equal(t, 1, before.Attempt)
	require.ErrorIs(t, staleErr, intentdb.ErrSentArgsFenced, "only the attempt holding the claim records")

	got, err := client.Get(ctx, "", "sent")
	require.NoError(t, err)
	require.Equal(t, outbox.StateUnknown, got.State)
	sent, err := queries.SentArgsOf(ctx, pool, got.ID)
	require.NoError(t, err)
	require.Equal(t, 1, sent.Attempt)
	require.JSONEq(t, `{"k":"`+got.ProviderKey+`","marker":"<!-- outbox -->"}`, string(sent.Arguments))

	// An intent of an effect that sends its args as they are has none.
	none, err := queries.SentArgsOf(ctx, pool, got.ID+1000)
	require.NoError(t, err)
	require.Nil(t, none)
}

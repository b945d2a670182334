package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outbox-dev/outbox/effects"
)

// IntentArgs is the River job of one intent. It carries only the intent's id,
// so River UI never shows an agent's arguments or personal data.
type IntentArgs struct {
	IntentID int64 `json:"intent_id"`
}

// Kind implements river.JobArgs.
func (IntentArgs) Kind() string { return "outbox_intent" }

// Defaults of IntentWorkerConfig.
const (
	EffectTimeoutDefault = 30 * time.Second
	MaxAttemptsDefault   = 25
)

// MaxAttemptsMargin is how many River attempts a job has beyond the outbox's
// own limit. The worker itself decides what exhaustion means (failed or
// unknown); the margin guarantees it gets to run once more after a crash on
// the last attempt, instead of River discarding the job and leaving the
// intent running forever.
const MaxAttemptsMargin = 3

// Lease returns the lease a claim takes for an effect timeout: the call's own
// deadline plus as much again for recording its outcome, so that a healthy
// attempt is never overtaken.
func Lease(effectTimeout time.Duration) time.Duration { return 2 * effectTimeout }

// IntentWorkerConfig configures an IntentWorker.
type IntentWorkerConfig struct {
	// EffectTimeout is one attempt's deadline for the provider call. The
	// claim's lease is Lease(EffectTimeout). Defaults to EffectTimeoutDefault.
	EffectTimeout time.Duration

	// Effects are the enabled effects. Required.
	Effects *effects.Registry

	// Logger receives one line per state change at debug, per failure at
	// warn and per unknown outcome at error. Defaults to a logger that
	// discards.
	Logger *slog.Logger

	// MaxAttempts is the number of attempts after which an intent that was
	// never confirmed ends failed (nothing can have been sent) or unknown
	// (something may have). Defaults to MaxAttemptsDefault.
	MaxAttempts int

	// Metrics receives the worker's metrics. Defaults to unregistered ones.
	Metrics *Metrics

	// Schema holds the outbox tables. Defaults to "outbox".
	Schema string
}

// IntentWorker is the River worker executing intents. Start it before the
// River client starts working and stop it after the client stopped.
type IntentWorker struct {
	river.WorkerDefaults[IntentArgs]

	effectTimeout time.Duration
	effects       *effects.Registry
	logger        *slog.Logger
	maxAttempts   int
	metrics       *Metrics

	claims   *batcher[claimReq, claimOutcome]
	finishes *batcher[finish, bool]
	reads    *batcher[int64, read]
	store    *store
}

// NewIntentWorker returns an IntentWorker.
func NewIntentWorker(pool *pgxpool.Pool, config *IntentWorkerConfig) (*IntentWorker, error) {
	if config == nil || config.Effects == nil {
		return nil, errors.New("workers: Effects must be set")
	}
	w := &IntentWorker{
		effectTimeout: config.EffectTimeout,
		effects:       config.Effects,
		logger:        config.Logger,
		maxAttempts:   config.MaxAttempts,
		metrics:       config.Metrics,
	}
	if w.effectTimeout == 0 {
		w.effectTimeout = EffectTimeoutDefault
	}
	if w.effectTimeout < 0 {
		return nil, errors.New("workers: EffectTimeout must be positive")
	}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	if w.maxAttempts == 0 {
		w.maxAttempts = MaxAttemptsDefault
	}
	if w.maxAttempts < 0 {
		return nil, errors.New("workers: MaxAttempts must be positive")
	}
	if w.metrics == nil {
		w.metrics = NewMetrics(nil)
	}
	schema := config.Schema
	if schema == "" {
		schema = "outbox"
	}
	st := newStore(pool, schema)
	// A batch's statement gets the effect timeout as its deadline: long
	// enough for a loaded database, short enough that a dead one releases
	// the workers to River's retry.
	w.claims = newBatcher(500, w.effectTimeout, st.claimBatch)
	w.finishes = newBatcher(500, w.effectTimeout, st.finishBatch)
	w.reads = newBatcher(500, w.effectTimeout, st.readBatch)
	w.store = st
	return w, nil
}

// Start starts the worker's batchers.
func (w *IntentWorker) Start() {
	// One flusher each: while a batch is in the database the next one
	// fills up, which is what keeps commits (and WAL flushes) per intent
	// low.
	w.claims.start(1)
	w.finishes.start(1)
	w.reads.start(1)
}

// Stop stops the batchers once in-flight batches are done. Call it only after
// the River client has stopped, so no Work is running.
func (w *IntentWorker) Stop() {
	w.claims.stop()
	w.finishes.stop()
	w.reads.stop()
}

// MaxAttempts is the River job's max_attempts for the worker's limit.
func (w *IntentWorker) MaxAttempts() int { return w.maxAttempts + MaxAttemptsMargin }

// Work runs one attempt of an intent; see the package documentation for the
// order of its steps.
func (w *IntentWorker) Work(ctx context.Context, job *river.Job[IntentArgs]) error {
	id := job.Args.IntentID
	var c *claimed
	// The job's queue is its intent's effect, so whether it may be
	// deduplicated is known before the intent is read.
	if e, ok := w.effects.Get(job.Queue); ok && mayDedupe(e) {
		r, err := w.reads.do(ctx, id)
		if err != nil {
			return err
		}
		switch {
		case !r.found || intentState(r.state).terminal():
			return nil
		case r.state == "pending" && effects.GuaranteeOf(e, r.args) == effects.GuaranteeDeduplicated:
			c = &r.claimed
			c.prevState = "pending"
			c.expectState, c.expectAttempt = "pending", r.attempt
			// Every River attempt of this job that ran the effect recorded
			// its outcome in job_attempt, except one that died: then the
			// provider may have acted. Died attempts count as attempts, so
			// that the attempt number still grows with every try.
			lost := job.Attempt - r.jobAttempt - 1
			c.attempt = r.attempt + 1 + max(lost, 0)
			if lost > 0 {
				c.prevState = "running"
				c.maybeSent = true
			}
		}
		// Not deduplicated for these args (a webhook to an endpoint that
		// does not dedupe), or running (left by a version that claimed
		// deduplicated intents): take the general path below.
	}
	if c == nil {
		out, err := w.claims.do(ctx, claimReq{id: id, lease: Lease(w.effectTimeout)})
		if err != nil {
			return err // nothing claimed, nothing sent: River retries
		}
		if c = out.claimed; c == nil {
			return w.notClaimed(ctx, id, &out)
		}
		// Checked first: at thousands of claims a second, building the
		// attributes of a line nobody reads would show.
		if w.logger.Enabled(ctx, slog.LevelDebug) {
			w.logger.DebugContext(ctx, "intent state changed", slog.Int64("intent_id", c.id), slog.String("effect", c.effect),
				slog.Int("attempt", c.attempt), slog.String("state", "running"))
		}
	}
	c.jobAttempt = job.Attempt

	effect, ok := w.effects.Get(c.effect)
	if !ok {
		return w.finish(ctx, c, "unknown_effect", finish{state: "failed",
			err: errJSON("unknown_effect", fmt.Sprintf("effect %q is not enabled in this dispatcher", c.effect))}, nil)
	}
	guarantee := effects.GuaranteeOf(effect, c.args)
	reconciler, canLookup := effect.(effects.Reconciler)
	if guarantee == effects.GuaranteeReconcilable && !canLookup {
		// The registry refuses such effects, but an ArgsGuaranteer could
		// still answer reconcilable: without a look-up, assume the worst.
		guarantee = effects.GuaranteeAtMostOnce
	}
	// An at-most-once intent whose earlier attempt may have reached the
	// provider is never sent again, even when it comes back pending (its
	// guarantee changed with the configuration, or a stale attempt marked
	// it after an operator's retry).
	lost := c.prevState == "running" || (c.maybeSent && guarantee == effects.GuaranteeAtMostOnce)

	// An earlier attempt was the last one and died: decide without sending.
	if job.Attempt > w.maxAttempts {
		return w.finish(ctx, c, "exhausted", w.exhausted(c, "attempts exhausted"), nil)
	}

	req := &effects.Request{Args: c.args, Attempt: c.attempt, IntentID: c.id, Namespace: c.namespace, ProviderKey: c.providerKey}
	if lost {
		switch guarantee {
		case effects.GuaranteeAtMostOnce:
			// The provider can neither dedupe nor be asked: do not guess.
			return w.finish(ctx, c, "unknown", finish{state: "unknown", maybeSent: true,
				err: errJSON("outcome_lost", "an attempt may have reached the provider and its outcome was lost")}, nil)
		case effects.GuaranteeReconcilable:
			lookupCtx, cancel := context.WithTimeout(ctx, w.effectTimeout)
			result, found, err := reconciler.Lookup(lookupCtx, c.providerKey)
			cancel()
			if err != nil {
				// Nothing was sent by this attempt: release the lease so the
				// retry looks up again at once.
				if ferr := w.finish(ctx, c, "lookup_failed", finish{state: "running", maybeSent: true,
					err: errJSON("lookup_failed", err.Error())}, nil); ferr != nil {
					return ferr
				}
				return fmt.Errorf("error looking up intent %d at provider: %w", c.id, err)
			}
			if found {
				return w.finish(ctx, c, "reconciled", finish{state: "succeeded", result: result}, nil)
			}
			// Not found: the lost attempt did not act. Send again with the
			// same provider key.
		}
	}
	// A deduplicated effect is retried with the same provider key after a
	// lost or ambiguous outcome, but past the provider's window a reused key
	// is a new request: retrying could act twice.
	if c.maybeSent && guarantee == effects.GuaranteeDeduplicated {
		if window := effects.DedupeWindow(effect); time.Since(c.createdAt) > window {
			return w.finish(ctx, c, "unknown", finish{state: "unknown", maybeSent: true,
				err: errJSON("dedupe_window_passed", "an earlier attempt may have acted and the intent is older than the provider's dedupe window ("+window.String()+")")}, nil)
		}
	}

	callCtx, cancel := context.WithTimeout(ctx, w.effectTimeout)
	start := time.Now()
	result, err := effect.Execute(callCtx, req)
	cancel()
	w.metrics.EffectDuration.WithLabelValues(c.effect).Observe(time.Since(start).Seconds())

	if err == nil {
		if len(result) == 0 || !json.Valid(result) {
			result = json.RawMessage(`{}`)
		}
		return w.finish(ctx, c, "succeeded", finish{state: "succeeded", result: result}, nil)
	}

	class, code := effects.Classify(err)
	last := job.Attempt >= w.maxAttempts
	switch class {
	case effects.ClassPermanent:
		return w.finish(ctx, c, "failed", finish{state: "failed", err: errJSON(code, err.Error())}, nil)

	case effects.ClassNotSent:
		if last {
			return w.finish(ctx, c, "not_sent", w.exhausted(c, err.Error()), nil)
		}
		return w.finish(ctx, c, "not_sent", finish{state: "pending", err: errJSON(code, err.Error())}, err)

	default: // ambiguous
		switch guarantee {
		case effects.GuaranteeAtMostOnce:
			return w.finish(ctx, c, "ambiguous", finish{state: "unknown", maybeSent: true, err: errJSON(code, err.Error())}, nil)
		case effects.GuaranteeReconcilable:
			if last {
				return w.finish(ctx, c, "ambiguous", finish{state: "unknown", maybeSent: true, err: errJSON(code, err.Error())}, nil)
			}
			// Keep the lease: the request may still be in flight, so the
			// look-up must wait for the lease to end.
			return w.finish(ctx, c, "ambiguous", finish{state: "running", maybeSent: true, keepLease: true, err: errJSON(code, err.Error())}, err)
		default: // deduplicated: the same provider key makes a retry safe
			if last {
				return w.finish(ctx, c, "ambiguous", finish{state: "unknown", maybeSent: true, err: errJSON(code, err.Error())}, nil)
			}
			return w.finish(ctx, c, "ambiguous", finish{state: "pending", maybeSent: true, err: errJSON(code, err.Error())}, err)
		}
	}
}

// mayDedupe reports whether e is, or for some arguments can be, deduplicated.
func mayDedupe(e effects.Effect) bool {
	if _, ok := e.(effects.ArgsGuaranteer); ok {
		return true
	}
	return e.Guarantee() == effects.GuaranteeDeduplicated
}

// notClaimed handles a job whose intent could not be claimed.
func (w *IntentWorker) notClaimed(ctx context.Context, id int64, out *claimOutcome) error {
	switch {
	case !out.found:
		// Pruned, or never existed: nothing to do.
		return nil
	case out.state == "running" && out.leaseExpiresAt != nil:
		// Another attempt holds a live lease: a job rescued or retried
		// while its first worker still runs, or a reconcilable intent whose
		// ambiguous request may still be in flight. Come back when the
		// lease ends, without spending an attempt.
		// (The lease may have ended since the claim looked: River refuses a
		// negative snooze.)
		return river.JobSnooze(max(time.Until(*out.leaseExpiresAt), 0) + 50*time.Millisecond)
	default:
		// Terminal: a re-run job, a River UI retry of a completed job, or a
		// job rescued after its intent was finished. Harmless by design.
		w.logger.DebugContext(ctx, "intent already final, job does nothing",
			slog.Int64("intent_id", id), slog.String("state", out.state))
		return nil
	}
}

// intentState mirrors outbox.State for the few checks the worker needs, without
// importing the write-side package.
type intentState string

func (s intentState) terminal() bool {
	return s == "succeeded" || s == "failed" || s == "unknown" || s == "cancelled"
}

// exhausted is the final outcome once attempts ran out: failed when no
// attempt can have reached the provider, unknown when one may have.
func (w *IntentWorker) exhausted(c *claimed, msg string) finish {
	if c.maybeSent || c.prevState == "running" {
		return finish{state: "unknown", maybeSent: true, err: errJSON("attempts_exhausted", msg)}
	}
	return finish{state: "failed", err: errJSON("attempts_exhausted", msg)}
}

// finish records an attempt's outcome, fenced on its attempt number, and
// returns retryErr (which makes River retry) once the outcome is durable.
func (w *IntentWorker) finish(ctx context.Context, c *claimed, outcome string, f finish, retryErr error) error {
	f.id, f.attempt = c.id, c.attempt
	f.expectState, f.expectAttempt, f.jobAttempt = c.expectState, c.expectAttempt, c.jobAttempt
	// A lost outcome detected by a deduplicated read is recorded with the
	// outcome (a claim records it itself).
	f.maybeSent = f.maybeSent || c.maybeSent
	// The outcome is known now; record it even if River is cancelling the
	// attempt (a stop past the effect timeout), or the next attempt would
	// take a known outcome for a lost one.
	applied, err := w.finishes.do(context.WithoutCancel(ctx), f)
	if err != nil {
		// Not recorded: the intent stays running under our lease, and the
		// next attempt treats this one's outcome as lost. That is exactly
		// right, since it was.
		return err
	}
	if !applied {
		if f.state == "succeeded" || f.state == "unknown" || f.maybeSent {
			// This attempt may have reached the provider even though another
			// took the intent over; whoever decides on exhaustion or the
			// dedupe window later must know.
			if err := w.store.markMaybeSent(context.WithoutCancel(ctx), c.id); err != nil {
				return err
			}
		}
		w.metrics.StaleWrites.Inc()
		w.metrics.EffectAttempts.WithLabelValues(c.effect, "stale").Inc()
		w.logger.WarnContext(ctx, "stale attempt's write rejected: another attempt took the intent over",
			slog.Int64("intent_id", c.id), slog.Int("attempt", c.attempt), slog.String("outcome", outcome))
		return nil
	}
	w.metrics.EffectAttempts.WithLabelValues(c.effect, outcome).Inc()
	attrs := []any{slog.Int64("intent_id", c.id), slog.String("effect", c.effect), slog.Int("attempt", c.attempt), slog.String("state", f.state)}
	switch {
	case f.state == "unknown":
		w.logger.ErrorContext(ctx, "intent outcome unknown: an operator must resolve it", append(attrs, slog.String("error", string(f.err)))...)
	case f.err != nil:
		w.logger.WarnContext(ctx, "intent attempt failed", append(attrs, slog.String("error", string(f.err)))...)
	case w.logger.Enabled(ctx, slog.LevelDebug):
		w.logger.DebugContext(ctx, "intent state changed", attrs...)
	}
	return retryErr
}

func errJSON(code, message string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
	return b
}

package riverworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// HeldQueueSnooze is how long a job of a queue this replica holds waits
// before it is fetched again, by whichever replica.
const HeldQueueSnooze = time.Second

// RetryAfterMax caps how long an attempt honours a provider's Retry-After:
// a provider that asks for an hour is asked again after this, with no
// attempt spent.
const RetryAfterMax = 10 * time.Minute

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
	// claim's lease is Lease(EffectTimeout). Defaults to workers.EffectTimeoutDefault.
	EffectTimeout time.Duration

	// Effects are the enabled effects. Required.
	Effects *effects.Registry

	// Logger receives one line per state change at debug, per failure at
	// warn and per unknown outcome at error. Defaults to a logger that
	// discards.
	Logger *slog.Logger

	// MaxAttempts is the number of attempts after which an intent that was
	// never confirmed ends failed (nothing can have been sent) or unknown
	// (something may have). Defaults to workers.MaxAttemptsDefault.
	MaxAttempts int

	// Metrics receives the worker's metrics. Defaults to unregistered ones.
	Metrics *workers.Metrics

	// Schema holds the outbox tables. Defaults to "outbox".
	Schema string

	// TracerProvider makes each attempt a span ("attempt {effect}"),
	// linked to the span that enqueued the intent, with the provider's
	// requests as its children. Defaults to the global provider, a no-op
	// unless traces were configured.
	TracerProvider trace.TracerProvider
	// HeldQueueFunc, when set, says why this worker does not work a River
	// queue for now, or "" (dispatcher.Config's).
	HeldQueueFunc func(queue string) string
}

// IntentWorker is the River worker executing intents. Start it before the
// River client starts working and stop it after the client stopped.
type IntentWorker struct {
	river.WorkerDefaults[workers.IntentArgs]

	effectTimeout time.Duration
	effects       *effects.Registry
	logger        *slog.Logger
	maxAttempts   int
	metrics       *workers.Metrics
	tracer        trace.Tracer
	heldQueue     func(queue string) string

	claims   *batcher[claimReq, claimOutcome]
	finishes *batcher[intentdb.Finish, bool]
	reads    *batcher[int64, *intentdb.AttemptRow]
	store    *store
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *IntentWorkerConfig) withDefaults() *IntentWorkerConfig {
	if c == nil {
		c = &IntentWorkerConfig{}
	}
	out := *c
	if out.EffectTimeout == 0 {
		out.EffectTimeout = workers.EffectTimeoutDefault
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = workers.MaxAttemptsDefault
	}
	if out.Metrics == nil {
		out.Metrics = workers.NewMetrics(nil)
	}
	if out.Schema == "" {
		out.Schema = outbox.SchemaDefault
	}
	if out.TracerProvider == nil {
		out.TracerProvider = otel.GetTracerProvider()
	}
	return &out
}

// validate checks a config with its defaults.
func (c *IntentWorkerConfig) validate() error {
	switch {
	case c.Effects == nil:
		return errors.New("workers: Effects must be set")
	case c.EffectTimeout < 0:
		return errors.New("workers: EffectTimeout must be positive")
	case c.MaxAttempts < 0:
		return errors.New("workers: MaxAttempts must be positive")
	}
	return nil
}

// NewIntentWorker returns an IntentWorker.
func NewIntentWorker(pool *pgxpool.Pool, config *IntentWorkerConfig) (*IntentWorker, error) {
	c := config.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	w := &IntentWorker{
		effectTimeout: c.EffectTimeout,
		effects:       c.Effects,
		logger:        c.Logger,
		maxAttempts:   c.MaxAttempts,
		metrics:       c.Metrics,
		tracer:        c.TracerProvider.Tracer(workers.TracerName),
		heldQueue:     c.HeldQueueFunc,
	}
	st := &store{pool: pool, queries: intentdb.New(c.Schema)}
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
// order of its steps, and Decide for what follows each of them.
func (w *IntentWorker) Work(ctx context.Context, job *river.Job[workers.IntentArgs]) error {
	if w.heldQueue != nil {
		if reason := w.heldQueue(job.Queue); reason != "" {
			// Nothing read, nothing claimed: the job goes back for a
			// replica that works its queue, and spends no attempt.
			w.logger.DebugContext(ctx, "job of a held queue snoozed", "queue", job.Queue, "intent_id", job.Args.IntentID, "reason", reason)
			return river.JobSnooze(HeldQueueSnooze)
		}
	}
	if job.Args.Effect != "" {
		if _, ok := w.effects.Get(job.Args.Effect); !ok {
			// A shared queue's job (an MCP upstream's) of an effect this
			// replica does not run: another replica's lock has the tool,
			// and this one's does not (a rollout, a re-pin). Never failed
			// here: nothing read, nothing claimed, back for a replica that
			// runs it.
			w.logger.DebugContext(ctx, "job of an effect this replica does not run snoozed", "queue", job.Queue, "effect", job.Args.Effect, "intent_id", job.Args.IntentID)
			return river.JobSnooze(HeldQueueSnooze)
		}
	}
	effect := job.Args.Effect
	if effect == "" {
		effect = job.Queue
	}
	return w.work(ctx, jobRef{intentID: job.Args.IntentID, effect: effect, attempt: job.Attempt})
}

// jobRef is what an attempt needs to know of the River job running it: a
// job of its own (IntentArgs), or a batch of first attempts
// (IntentBatchArgs).
type jobRef struct {
	intentID int64
	// effect is the intent's effect: the job's queue, or its args' Effect
	// where the queue is shared (effects.Queuer).
	effect string
	// attempt is the job's River attempt.
	attempt int
	// batchJobID is the batch job running the attempt, or 0 for a job of
	// the intent's own. A batch's finish is fenced on it.
	batchJobID int64
	// read is the intent as its batch read it when the batch began, or
	// nil: the attempt then reads it itself.
	read *intentdb.AttemptRow
}

// work runs one attempt of an intent for job.
func (w *IntentWorker) work(ctx context.Context, job jobRef) error {
	// What the attempt needs of the provider (an upstream's slot and
	// session) is taken before the claim: a slow start or a crash during
	// it leaves the intent unclaimed, and the wait eats no attempt's
	// timeout.
	if e, ok := w.effects.Get(job.effect); ok {
		if r, ok := e.(effects.Reserver); ok {
			var release func()
			ctx, release = r.Reserve(ctx)
			defer release()
		}
	}
	c, err := w.begin(ctx, job)
	if c == nil || err != nil {
		return err
	}
	ctx, span := w.startAttemptSpan(ctx, c)
	defer span.End()
	c.jobAttempt = job.attempt
	c.expectJobID = job.batchJobID

	effect, ok := w.effects.Get(c.Effect)
	if !ok || !effects.AllowedIn(effect, c.Namespace) {
		return w.finish(ctx, c, workers.Decision{State: outbox.StateFailed, Code: outbox.CodeUnknownEffect, Outcome: outbox.CodeUnknownEffect},
			fmt.Sprintf("effect %q is not enabled in this dispatcher", c.Effect), nil, nil)
	}
	guarantee := effects.GuaranteeOf(effect, c.Args)
	reconciler, canLookup := effect.(effects.Reconciler)
	if guarantee == effects.GuaranteeReconcilable && !canLookup {
		// The registry refuses such effects, but an ArgsGuaranteer could
		// still answer reconcilable: without a look-up, assume the worst.
		guarantee = effects.GuaranteeAtMostOnce
	}
	spanGuarantee(span, guarantee)
	sit := workers.Situation{
		Step:      workers.StepStart,
		Guarantee: guarantee,
		// An at-most-once intent whose earlier attempt may have reached the
		// provider is never sent again, even when it comes back pending
		// (its guarantee changed with the configuration, or a stale attempt
		// marked it after an operator's retry).
		Lost:      c.prevState == outbox.StateRunning || (c.MaybeSent && guarantee == effects.GuaranteeAtMostOnce),
		MaybeSent: c.MaybeSent,
		// A deduplicated effect is retried with the same provider key after
		// a lost or ambiguous outcome, but past the provider's window a
		// reused key is a new request: retrying could act twice. Judged on
		// the database's clock, a margin before the window ends.
		PastWindow: guarantee == effects.GuaranteeDeduplicated && pastWindow(c.Age, effects.DedupeWindow(effect)),
		Exhausted:  job.attempt > w.maxAttempts,
		Last:       job.attempt >= w.maxAttempts,
		// The declaration an earlier attempt was sent under, against the
		// one in force now (declared effects only).
		DeclarationChanged: c.DeclarationSHA256 != "" && declarationOf(w.effects, c.Effect) != "" &&
			c.DeclarationSHA256 != declarationOf(w.effects, c.Effect),
	}

	// An effect that records checkpoints (an MCP upstream's call answered
	// with a task) resumes an earlier attempt's work: the provider received
	// that call, so it is neither looked up, nor given up as lost, nor sent
	// again; its task is polled. The intent may have acted all the same:
	// attempts that run out end it unknown, never failed.
	var checkpoint json.RawMessage
	cp, checkpoints := effect.(effects.Checkpointer)
	if checkpoints = checkpoints && cp.Checkpoints(); checkpoints {
		if checkpoint, err = w.store.queries.Checkpoint(ctx, w.store.pool, c.ID); err != nil {
			return w.finish(ctx, c, workers.Decision{State: outbox.StateRunning, KeepLease: true, Retry: true, MaybeSent: c.MaybeSent},
				"", nil, fmt.Errorf("error reading intent %d's checkpoint: %w", c.ID, err))
		}
		sit.MaybeSent = sit.MaybeSent || len(checkpoint) > 0
	}
	d := workers.Decide(sit)
	if len(checkpoint) > 0 && !sit.Exhausted && d.Action != workers.ActionSend {
		d = workers.Decision{Action: workers.ActionSend}
	}
	if d.Action == workers.ActionLookup {
		lookupCtx, cancel := context.WithTimeout(ctx, w.effectTimeout)
		var (
			result json.RawMessage
			found  bool
		)
		if rr, ok := effect.(effects.RequestReconciler); ok {
			req := &effects.Request{Args: c.Args, Attempt: c.Attempt, IntentID: c.ID, Namespace: c.Namespace, ProviderKey: c.ProviderKey}
			if c.SinceLastEnd > 0 {
				req.LastAttemptEnd = time.Now().Add(-c.SinceLastEnd)
			}
			result, found, err = rr.LookupRequest(lookupCtx, req, c.CreatedAt)
		} else {
			result, found, err = reconciler.Lookup(lookupCtx, c.ProviderKey)
		}
		cancel()
		sit.Step, sit.Found, sit.LookupFailed = workers.StepLookedUp, found, err != nil
		if d = workers.Decide(sit); d.Action == workers.ActionFinish {
			if err != nil {
				// Nothing was sent by this attempt: the lease is released so
				// the retry looks up again at once.
				return w.finish(ctx, c, d, err.Error(), nil, fmt.Errorf("error looking up intent %d at provider: %w", c.ID, err))
			}
			return w.finish(ctx, c, d, "", result, nil)
		}
	}
	if d.Action == workers.ActionFinish {
		return w.finish(ctx, c, d, w.startMessage(d, effect), nil, nil)
	}

	req := &effects.Request{Args: c.Args, Attempt: c.Attempt, IntentID: c.ID, Namespace: c.Namespace, ProviderKey: c.ProviderKey,
		Checkpoint: checkpoint, MaybeSent: c.MaybeSent}
	if checkpoints {
		req.CheckpointFunc = func(ctx context.Context, cp json.RawMessage) error {
			// Recorded at once, outside the finish: the attempt may die
			// before it finishes, and the next must find the work to resume.
			if err := w.store.queries.SetCheckpoint(context.WithoutCancel(ctx), w.store.pool, c.ID, c.Attempt, cp); err != nil {
				return err
			}
			checkpoint = cp
			return nil
		}
		req.CancelRequestedFunc = func(ctx context.Context) (bool, error) {
			return w.store.queries.CancelRequested(ctx, w.store.pool, c.ID)
		}
	}
	if r, ok := effect.(effects.SentArgsRecorder); ok && r.RecordsSentArgs() {
		req.RecordSentFunc = func(ctx context.Context, args json.RawMessage) error {
			// Recorded before the request is written, outside the finish:
			// an attempt that dies mid-call leaves what it sent on the
			// intent it leaves unknown.
			return w.store.queries.SetSentArgs(ctx, w.store.pool, c.ID, c.Attempt, args)
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, w.effectTimeout)
	start := time.Now()
	result, err := effect.Execute(callCtx, req)
	cancel()
	w.metrics.EffectDuration.WithLabelValues(c.Effect).Observe(time.Since(start).Seconds())

	sit.Step = workers.StepCalled
	// A checkpoint recorded by this attempt counts as a send that reached
	// the provider.
	sit.MaybeSent = sit.MaybeSent || len(checkpoint) > 0
	if err == nil {
		if len(result) == 0 || !json.Valid(result) {
			result = json.RawMessage(`{}`)
		}
		return w.finish(ctx, c, workers.Decide(sit), "", result, nil)
	}
	class, code := effects.Classify(err)
	if class == effects.ClassCancelled {
		if len(checkpoint) > 0 && w.cancelRequested(ctx, c.ID) {
			// The provider stopped the work an operator asked it to
			// cancel: the intent ends cancelled, recorded as the
			// operator's cancel (the finish copies the request).
			return w.finish(ctx, c, workers.Decision{State: outbox.StateCancelled, Code: code, MaybeSent: true}, err.Error(), nil, nil)
		}
		// Nobody asked: a provider that says it stopped on its own is an
		// error after the send.
		class = effects.ClassAmbiguous
	}
	sit.Class = class
	d = workers.Decide(sit)
	if len(checkpoint) > 0 && class == effects.ClassAmbiguous {
		// Work the provider received ended without a result it can give
		// again (its task failed, was cancelled or asks for input):
		// another attempt would only poll the same answer.
		d = workers.Decision{State: outbox.StateUnknown, Outcome: "ambiguous", MaybeSent: true}
	}
	if d.Code == "" {
		d.Code = code
	}
	var retryErr error
	if d.Retry {
		retryErr = err
	}
	if wait := effects.RetryAfterOf(err); wait > 0 && d.Retry && d.State == outbox.StatePending && !sit.Last {
		// The provider did not take the request and said when to come
		// back (a 429 or 503 with Retry-After): wait that long rather than
		// River's backoff, without spending an attempt. A snooze rewinds
		// the job's attempt counter, so the attempt recorded is the one
		// before: the next run, under the same number as this one, then
		// reads as the attempt after the last recorded, and an attempt that
		// dies mid-call after the snooze is still seen as lost (and bars a
		// cancel).
		c.jobAttempt = job.attempt - 1
		retryErr = river.JobSnooze(min(wait, RetryAfterMax))
	}
	return w.finish(ctx, c, d, err.Error(), nil, retryErr)
}

// cancelRequested reports whether an operator asked to cancel intent id
// (its provider holding the work); false when it cannot be read, so that an
// unreadable request never ends an intent cancelled.
func (w *IntentWorker) cancelRequested(ctx context.Context, id int64) bool {
	requested, err := w.store.queries.CancelRequested(context.WithoutCancel(ctx), w.store.pool, id)
	return err == nil && requested
}

// pastWindow reports whether an intent of age is too close to the end of a
// provider's dedupe window to resend under its key. The margin (1/24 of the
// window: an hour of Stripe's 24) covers the time between this decision and
// the request's arrival, and clocks that disagree with the provider's.
func pastWindow(age, window time.Duration) bool { return age > window-window/24 }

// startMessage explains a decision taken before anything was sent.
func (w *IntentWorker) startMessage(d workers.Decision, effect effects.Effect) string {
	switch d.Code {
	case workers.CodeOutcomeLost:
		return "an attempt may have reached the provider and its outcome was lost"
	case workers.CodeDedupeWindowPassed:
		return "an earlier attempt may have acted and the intent is older than the provider's dedupe window (" + effects.DedupeWindow(effect).String() + ")"
	case workers.CodeDeclarationChanged:
		return "an earlier attempt may have reached the provider under another declaration of the effect (OUTBOX_EFFECTS_FILE changed): sending the new request under the same provider key could act twice"
	}
	return "attempts exhausted"
}

// begin claims the intent for this attempt (or, for a deduplicated effect,
// reads it). It returns nil when there is nothing to do, with the error or
// snooze River should see.
func (w *IntentWorker) begin(ctx context.Context, job jobRef) (*claimed, error) {
	id := job.intentID
	// The job names its intent's effect, so whether it may be
	// deduplicated is known before the intent is read.
	if e, ok := w.effects.Get(job.effect); ok && mayDedupe(e) {
		// A batch read its intents when it began (one statement for all).
		// What changed since cannot be written over: the finish is fenced
		// on the state, attempt number and job read, and a resend of a
		// deduplicated effect under its provider key is deduplicated.
		r := job.read
		if r == nil {
			var err error
			if r, err = w.reads.do(ctx, id); err != nil {
				return nil, err
			}
		}
		switch {
		case r == nil:
			return nil, nil
		case outbox.State(r.State).Terminal():
			recordOutput(ctx, &workers.AttemptOutput{IntentID: id, State: r.State})
			return nil, nil
		case outbox.State(r.State) == outbox.StatePending && effects.GuaranteeOf(e, r.Args) == effects.GuaranteeDeduplicated:
			c := &claimed{AttemptRow: *r, prevState: outbox.StatePending, expectState: outbox.StatePending, expectAttempt: r.Attempt}
			// Every River attempt of this job that ran the effect recorded
			// its outcome in job_attempt, except one that died: then the
			// provider may have acted. Died attempts count as attempts, so
			// that the attempt number still grows with every try.
			lost := job.attempt - r.JobAttempt - 1
			c.Attempt = r.Attempt + 1 + max(lost, 0)
			if lost > 0 {
				c.prevState = outbox.StateRunning
				c.MaybeSent = true
			}
			return c, nil
		}
		// Not deduplicated for these args (a webhook to an endpoint that
		// does not dedupe), or running (left by a version that claimed
		// deduplicated intents): take the general path below.
	}
	out, err := w.claims.do(ctx, claimReq{id: id, lease: Lease(w.effectTimeout), decl: declarationOf(w.effects, job.effect)})
	if err != nil {
		return nil, err // nothing claimed, nothing sent: River retries
	}
	if out.claimed == nil {
		return nil, w.notClaimed(ctx, id, &out)
	}
	// Checked first: at thousands of claims a second, building the
	// attributes of a line nobody reads would show.
	if w.logger.Enabled(ctx, slog.LevelDebug) {
		w.logger.DebugContext(ctx, "intent state changed", slog.Int64("intent_id", out.claimed.ID), slog.String("effect", out.claimed.Effect),
			slog.Int("attempt", out.claimed.Attempt), slog.String("state", string(outbox.StateRunning)))
	}
	return out.claimed, nil
}

// recordOutput records out as the job's output. Outside River (a test
// calling Work) there is nowhere to record it, which is no error. An attempt
// run by a batch job records nothing: the batch records its own summary.
func recordOutput(ctx context.Context, out *workers.AttemptOutput) {
	if ctx.Value(inBatchKey{}) != nil {
		return
	}
	_ = river.RecordOutput(ctx, out)
}

// StaleAttemptError is what an attempt returns to River when another attempt
// took its intent over and its own outcome was not recorded: River retries
// the job, so that it completes only once its intent is terminal.
type StaleAttemptError struct {
	// IntentID is the intent.
	IntentID int64
	// Attempt is the stale attempt's number.
	Attempt int
}

func (e *StaleAttemptError) Error() string {
	return fmt.Sprintf("attempt %d of intent %d is stale: another attempt took the intent over", e.Attempt, e.IntentID)
}

// OutcomeNotRecordedError is what an attempt returns when its outcome could
// not be written: the provider may have acted, and the intent does not say
// so. A job of the intent's own learns it from River's attempt counter; a
// batch hands the intent over marked maybe_sent.
type OutcomeNotRecordedError struct {
	Err error
}

// Error implements error.
func (e *OutcomeNotRecordedError) Error() string {
	return "the attempt's outcome was not recorded: " + e.Err.Error()
}

// Unwrap returns the database's error.
func (e *OutcomeNotRecordedError) Unwrap() error { return e.Err }

// declarationOf returns the declaration in force for effect (a declared
// effect's sha256), or "".
func declarationOf(registry *effects.Registry, effect string) string {
	if e, ok := registry.Get(effect); ok {
		if d, ok := e.(effects.Declarer); ok {
			return d.DeclarationSHA256()
		}
	}
	return ""
}

// mayDedupe reports whether e is, or for some arguments can be, deduplicated.
func mayDedupe(e effects.Effect) bool {
	if effects.AlwaysClaims(e) {
		return false
	}
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
	case out.state == outbox.StateRunning && out.leaseExpiresAt != nil:
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
			slog.Int64("intent_id", id), slog.String("state", string(out.state)))
		recordOutput(ctx, &workers.AttemptOutput{IntentID: id, State: string(out.state)})
		return nil
	}
}

// finish records a decision, fenced on the attempt number, and returns
// retryErr (which makes River retry) once the outcome is durable. message
// explains the error recorded with d.Code; result is the provider's answer.
func (w *IntentWorker) finish(ctx context.Context, c *claimed, d workers.Decision, message string, result json.RawMessage, retryErr error) error {
	f := intentdb.Finish{
		ID:            c.ID,
		Attempt:       c.Attempt,
		ExpectState:   string(c.expectState),
		ExpectAttempt: c.expectAttempt,
		JobAttempt:    c.jobAttempt,
		ExpectJobID:   c.expectJobID,
		State:         string(d.State),
		Result:        result,
		// A lost outcome detected by a deduplicated read is recorded with
		// the outcome (a claim records it itself).
		MaybeSent: d.MaybeSent || c.MaybeSent,
		KeepLease: d.KeepLease,
		// A deduplicated attempt is not claimed: its finish records the
		// declaration it was sent under.
		DeclarationSHA256: declarationOf(w.effects, c.Effect),
	}
	if d.Code != "" {
		f.Err = intentdb.ErrorJSON(d.Code, message)
	}
	// The outcome is known now; record it even if River is cancelling the
	// attempt (a stop past the effect timeout), or the next attempt would
	// take a known outcome for a lost one.
	applied, err := w.finishes.do(context.WithoutCancel(ctx), f)
	if err != nil {
		// Not recorded: the intent stays running under our lease, and the
		// next attempt treats this one's outcome as lost. That is exactly
		// right, since it was.
		spanOutcome(trace.SpanFromContext(ctx), outcomeNotRecorded, "", "")
		return &OutcomeNotRecordedError{Err: err}
	}
	if !applied {
		if d.State == outbox.StateSucceeded || d.State == outbox.StateUnknown || f.MaybeSent {
			// This attempt may have reached the provider even though another
			// took the intent over; whoever decides on exhaustion or the
			// dedupe window later must know.
			if err := w.store.markMaybeSent(context.WithoutCancel(ctx), c.ID); err != nil {
				return &OutcomeNotRecordedError{Err: err}
			}
		}
		w.metrics.StaleWrites.Inc()
		w.metrics.EffectAttempts.WithLabelValues(c.Effect, "stale").Inc()
		spanOutcome(trace.SpanFromContext(ctx), "stale", "", d.Code)
		w.logger.WarnContext(ctx, "stale attempt's write rejected: another attempt took the intent over",
			slog.Int64("intent_id", c.ID), slog.Int("attempt", c.Attempt), slog.String("outcome", d.Outcome))
		// Never success: River's completion is not fenced by attempt, so a
		// stale attempt that returned nil would complete the job that the
		// attempt which took over still needs, and an outcome that one then
		// leaves for a retry (not sent, ambiguous) would never be retried.
		// A plain error, not a snooze: a snooze rewinds the job's attempt
		// counter, which the deduplicated path counts lost attempts with.
		// The retry finds the intent terminal and completes the job, or
		// takes its turn.
		recordOutput(ctx, &workers.AttemptOutput{Attempt: c.Attempt, IntentID: c.ID, State: "stale"})
		return &StaleAttemptError{IntentID: c.ID, Attempt: c.Attempt}
	}
	recordOutput(ctx, &workers.AttemptOutput{
		Attempt: c.Attempt, ErrorCode: d.Code, IntentID: c.ID,
		ProviderObjectID: effects.ProviderObjectID(result), State: string(d.State),
	})
	w.metrics.EffectAttempts.WithLabelValues(c.Effect, d.Outcome).Inc()
	spanOutcome(trace.SpanFromContext(ctx), d.Outcome, d.State, d.Code)
	attrs := []any{slog.Int64("intent_id", c.ID), slog.String("effect", c.Effect), slog.Int("attempt", c.Attempt), slog.String("state", string(d.State))}
	switch {
	case d.State == outbox.StateUnknown:
		w.logger.ErrorContext(ctx, "intent outcome unknown: an operator must resolve it", append(attrs, slog.String("error", string(f.Err)))...)
	case f.Err != nil:
		w.logger.WarnContext(ctx, "intent attempt failed", append(attrs, slog.String("error", string(f.Err)))...)
	case w.logger.Enabled(ctx, slog.LevelDebug):
		w.logger.DebugContext(ctx, "intent state changed", attrs...)
	}
	return retryErr
}

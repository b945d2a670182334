package riverworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// handOverDelay is how long an intent handed over after a failed attempt
// waits for its own job's first run: River's first backoff.
const handOverDelay = time.Second

// inBatchKey marks the context of an attempt run by a batch job, whose River
// job output is the batch's (BatchOutput) rather than any one intent's.
type inBatchKey struct{}

// IntentBatchWorker runs a batch of first attempts, each exactly as
// IntentWorker runs an attempt (the same reads, fencing and decisions), at
// most the concurrency it was made with at a time, across its batches. An
// intent whose attempt does not end it (a retry, a Retry-After, a stale
// write, an outcome not recorded, a panic, a batch out of time or stopped)
// is handed over to a River job of its own, which then retries it with
// River's backoff, so that every intent needing attention shows in River UI
// as itself.
//
// Only deduplicated effects are batched: a batch that dies is rescued whole,
// and resending its unfinished intents under their provider keys is safe
// only where the provider deduplicates.
type IntentBatchWorker struct {
	river.WorkerDefaults[workers.IntentBatchArgs]

	intents *IntentWorker
	logger  *slog.Logger
	pool    *pgxpool.Pool
	sem     chan struct{}
}

// NewIntentBatchWorker returns an IntentBatchWorker running iw's attempts, at
// most concurrency at a time across all of its batches.
func NewIntentBatchWorker(pool *pgxpool.Pool, iw *IntentWorker, concurrency int) (*IntentBatchWorker, error) {
	if iw == nil || concurrency <= 0 {
		return nil, errors.New("workers: a batch worker needs an IntentWorker and a positive concurrency")
	}
	return &IntentBatchWorker{intents: iw, logger: iw.logger, pool: pool, sem: make(chan struct{}, concurrency)}, nil
}

// The reasons of BatchIntentOutput.HandOverReason.
const (
	handOverNotBegun           = "not_begun"
	handOverRetry              = "retry"
	handOverRetryAfter         = "retry_after"
	handOverOutcomeNotRecorded = "outcome_not_recorded"
	batchIntentSkipped         = "skipped"
)

// Timeout is the batch's River timeout: the lease of one attempt, as for a
// job of its own. Work begins no attempt with less than an effect timeout
// left, so that the attempts it began end on their own deadlines, and River
// rescues the batch only well after it returned.
func (w *IntentBatchWorker) Timeout(*river.Job[workers.IntentBatchArgs]) time.Duration {
	return Lease(w.intents.effectTimeout)
}

// handOff is a member of a batch going on to a job of its own.
type handOff struct {
	member *intentdb.AttemptRow
	// delay is how long the new job waits: River's first backoff, or a
	// provider's Retry-After.
	delay time.Duration
	// maybeSent is set when the attempt may have reached the provider and
	// its outcome could not be recorded.
	maybeSent bool
	// reason is BatchIntentOutput.HandOverReason.
	reason string
}

// Work runs the batch's first attempts.
func (w *IntentBatchWorker) Work(ctx context.Context, job *river.Job[workers.IntentBatchArgs]) error {
	members, err := w.intents.store.queries.BatchOwned(ctx, w.pool, job.Args.IntentIDs, job.ID)
	if err != nil {
		return fmt.Errorf("error reading batch %d: %w", job.ID, err)
	}
	// Attempts begin only while an effect timeout is left before the
	// batch's deadline.
	beginCtx := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		beginCtx, cancel = context.WithDeadline(ctx, deadline.Add(-w.intents.effectTimeout))
		defer cancel()
	}
	attemptCtx := context.WithValue(ctx, inBatchKey{}, true)
	// A batch's queue is its effect's own (effects.Queuer's are never
	// batched).
	ref := jobRef{effect: job.Queue, attempt: job.Attempt, batchJobID: job.ID}
	var (
		mu       sync.Mutex
		out      = workers.BatchOutput{Skipped: len(job.Args.IntentIDs) - len(members)}
		handOffs []handOff
		wg       sync.WaitGroup
	)
	// waited is set once an attempt had to wait for a slot: from then on
	// the batch's read is old, and every later attempt reads its intent
	// again.
	waited := false
	for i, m := range members {
		// A select with both cases ready picks either: once the time to
		// begin is over, no slot is taken at all, and a slot taken is
		// always used (an attempt begun just then still has about an
		// effect timeout left).
		took := false
		if beginCtx.Err() == nil {
			select {
			case w.sem <- struct{}{}:
				took = true
			default:
				waited = true
				select {
				case w.sem <- struct{}{}:
					took = true
				case <-beginCtx.Done():
				}
			}
		}
		if !took {
			// The batch's time is up, or River is stopping it: the
			// intents not begun go on to jobs of their own, untouched.
			mu.Lock()
			for _, m := range members[i:] {
				handOffs = append(handOffs, handOff{member: m, reason: handOverNotBegun})
			}
			mu.Unlock()
			break
		}
		// An attempt begun before any had to wait uses the batch's read of
		// its intent (one statement for the batch instead of one read
		// each). Later ones read it again: the intent may have ended
		// meanwhile (re-dispatched and run by a job of its own), and a
		// fresh read then skips a call the provider would only have
		// deduplicated.
		read := m
		if waited {
			read = nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.attempt(attemptCtx, ref, m, read)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				out.Ended++
				return
			}
			h := handOff{member: m, delay: handOverDelay, reason: handOverRetry}
			var snooze *river.JobSnoozeError
			var notRecorded *OutcomeNotRecordedError
			switch {
			case errors.As(err, &snooze):
				h.delay, h.reason = snooze.Duration, handOverRetryAfter
			case errors.As(err, &notRecorded):
				h.maybeSent, h.reason = true, handOverOutcomeNotRecorded
			}
			handOffs = append(handOffs, h)
		}()
	}
	wg.Wait()
	// One transaction for all, whatever the batch's context says: the
	// attempts' outcomes are recorded, and they must go on.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.intents.effectTimeout)
	defer cancel()
	handed, err := w.handOver(hctx, job, handOffs)
	out.HandedOver = len(handed)
	out.Skipped += len(handOffs) - len(handed)
	out.Intents = w.outputLines(hctx, job, members, handOffs, handed)
	_ = river.RecordOutput(ctx, &out)
	return err
}

// outputLines reads the batch's intents once it is done with them, for
// BatchOutput.Intents: one statement per batch, so that River UI shows each
// intent's end state without a write per attempt. A failed read leaves the
// states out (the counts stay): the output is for people, and the intents
// themselves are safe.
func (w *IntentBatchWorker) outputLines(ctx context.Context, job *river.Job[workers.IntentBatchArgs], members []*intentdb.AttemptRow,
	handOffs []handOff, handed map[int64]int64,
) []workers.BatchIntentOutput {
	ids := job.Args.IntentIDs
	states, err := w.intents.store.queries.BatchStates(ctx, w.pool, ids)
	if err != nil {
		w.logger.WarnContext(ctx, "error reading a batch's intents for its output",
			slog.Int64("batch_job_id", job.ID), slog.String("error", err.Error()))
	}
	owned := make(map[int64]bool, len(members))
	for _, m := range members {
		owned[m.ID] = true
	}
	reasons := make(map[int64]string, len(handOffs))
	for _, h := range handOffs {
		reasons[h.member.ID] = h.reason
	}
	lines := make([]workers.BatchIntentOutput, 0, len(ids))
	for _, id := range slices.Sorted(slices.Values(ids)) {
		line := workers.BatchIntentOutput{IntentID: id, State: batchIntentSkipped}
		if s, ok := states[id]; ok && owned[id] {
			line.Attempt, line.ErrorCode, line.State = s.Attempt, s.ErrorCode, s.State
		}
		if jobID, ok := handed[id]; ok {
			line.HandedOverTo, line.HandOverReason = jobID, reasons[id]
		} else if _, ok := reasons[id]; ok && line.State == string(outbox.StatePending) {
			// Not handed over, yet not ended by the batch: another job
			// took it meanwhile (the reconciler re-dispatched it).
			line.State = batchIntentSkipped
		}
		lines = append(lines, line)
	}
	return lines
}

// attempt runs m's attempt, holding a concurrency slot until it ends, from
// read when not nil (the batch's read of m), else from a read of its own. A
// panic (an effect's bug) is the attempt's error, as River makes it a job's:
// it must not take the other attempts down with the process.
func (w *IntentBatchWorker) attempt(ctx context.Context, ref jobRef, m, read *intentdb.AttemptRow) (err error) {
	defer func() { <-w.sem }()
	defer func() {
		if r := recover(); r != nil {
			w.logger.ErrorContext(ctx, "attempt panicked", slog.Int64("intent_id", m.ID), slog.Any("panic", r))
			// Whether the provider was called is unknown.
			err = &OutcomeNotRecordedError{Err: fmt.Errorf("attempt panicked: %v", r)}
		}
	}()
	ref.intentID, ref.read = m.ID, read
	return w.intents.work(ctx, ref)
}

// errStaleBatch is a batch run's answer when River no longer runs the batch
// under its attempt (rescued, or retried in River UI, while it ran): the
// current run takes its intents, and this one must not complete the job.
var errStaleBatch = errors.New("workers: the batch is no longer running under this attempt; its current run takes its intents")

// handOver inserts a job of its own for each of handOffs still the batch's
// and points the intent at it, in one transaction: the intents are then
// their new jobs' and no longer the batch's. It returns the new jobs' ids
// by intent id.
func (w *IntentBatchWorker) handOver(ctx context.Context, job *river.Job[workers.IntentBatchArgs], handOffs []handOff) (map[int64]int64, error) {
	if len(handOffs) == 0 {
		return nil, nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil, err
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("error handing intents over: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	ids := make([]int64, len(handOffs))
	for i, h := range handOffs {
		ids[i] = h.member.ID
	}
	current, owned, err := w.intents.store.queries.LockBatchForHandOver(ctx, tx, ids, job.ID, job.Attempt)
	if err != nil {
		return nil, fmt.Errorf("error handing intents over: %w", err)
	}
	if !current {
		return nil, errStaleBatch
	}
	if len(owned) == 0 {
		return nil, nil // terminal, or re-dispatched by the reconciler
	}
	byID := make(map[int64]handOff, len(handOffs))
	for _, h := range handOffs {
		byID[h.member.ID] = h
	}
	now := time.Now()
	params := make([]river.InsertManyParams, len(owned))
	maybeSent := make([]bool, len(owned))
	for i, id := range owned {
		h := byID[id]
		maybeSent[i] = h.maybeSent
		params[i] = river.InsertManyParams{Args: workers.IntentArgs{IntentID: id}, InsertOpts: &river.InsertOpts{
			MaxAttempts: w.intents.MaxAttempts(),
			Metadata:    JobMetadata(h.member.Namespace, job.Queue),
			Queue:       job.Queue,
			ScheduledAt: now.Add(h.delay),
		}}
	}
	results, err := client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("error inserting the jobs of handed-over intents: %w", err)
	}
	jobIDs := make([]int64, len(results))
	for i, r := range results {
		// Matched by args, as the drain does, not by the results' order.
		var args workers.IntentArgs
		if err := json.Unmarshal(r.Job.EncodedArgs, &args); err != nil || args.IntentID != owned[i] {
			return nil, fmt.Errorf("river returned the job of intent %d at the position of %d", args.IntentID, owned[i])
		}
		jobIDs[i] = r.Job.ID
	}
	if err := w.intents.store.queries.HandOver(ctx, tx, owned, jobIDs, maybeSent); err != nil {
		return nil, fmt.Errorf("error handing intents over: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("error handing intents over: %w", err)
	}
	w.logger.DebugContext(ctx, "intents handed over from their batch to jobs of their own",
		slog.Int64("batch_job_id", job.ID), slog.Int("count", len(owned)))
	handed := make(map[int64]int64, len(owned))
	for i, id := range owned {
		handed[id] = jobIDs[i]
	}
	return handed, nil
}

// JobMetadata is an intent job's River metadata: whose intent, of which
// effect, so that River UI shows it without leaving. Never the key or the
// arguments, which can carry personal data.
func JobMetadata(namespace, effect string) []byte {
	b, _ := json.Marshal(jobMetadata{Effect: effect, Namespace: namespace}) //nolint:errchkjson // strings and an int always encode
	return b
}

// BatchJobMetadata is a batch job's River metadata: JobMetadata and how
// many intents the batch holds, so that River UI's list of jobs tells a
// batch of 300 from one of 2 without opening either.
func BatchJobMetadata(namespace, effect string, size int) []byte {
	b, _ := json.Marshal(jobMetadata{BatchSize: size, Effect: effect, Namespace: namespace}) //nolint:errchkjson // strings and an int always encode
	return b
}

type jobMetadata struct {
	BatchSize int    `json:"batch_size,omitempty"`
	Effect    string `json:"effect"`
	Namespace string `json:"namespace"`
}

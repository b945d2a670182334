package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

// IntentBatchArgs is the River job of a batch of first attempts: intents of
// one deduplicated effect, dispatched together so that River's writes of a
// job are paid once per batch instead of once per intent. Like IntentArgs it
// carries only ids. See docs/design.md, "First attempts in batches".
type IntentBatchArgs struct {
	IntentIDs []int64 `json:"intent_ids"`
}

// Kind implements river.JobArgs.
func (IntentBatchArgs) Kind() string { return "outbox_intent_batch" }

// handOverDelay is how long an intent handed over after a failed attempt
// waits for its own job's first run: River's first backoff.
const handOverDelay = time.Second

// inBatchKey marks the context of an attempt run by a batch job, whose River
// job output is the batch's summary rather than any one intent's.
type inBatchKey struct{}

// IntentBatchWorker runs a batch of first attempts, each exactly as
// IntentWorker runs an attempt (the same reads, fencing and decisions), at
// most Concurrency at a time. An intent whose attempt does not end it (a
// retry, a Retry-After, a stale write, a shutdown) is handed over to a River
// job of its own, which then retries it with River's backoff, so that every
// intent needing attention shows in River UI as itself.
//
// Only deduplicated effects are batched: a batch that dies is rescued whole,
// and resending its unfinished intents under their provider keys is safe
// only where the provider deduplicates.
type IntentBatchWorker struct {
	river.WorkerDefaults[IntentBatchArgs]

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

// BatchOutput is what a batch job records as its River job output.
type BatchOutput struct {
	// Ended is how many of its intents the batch left terminal.
	Ended int `json:"ended"`
	// HandedOver is how many went on to a job of their own.
	HandedOver int `json:"handed_over"`
	// Skipped is how many belonged to another job by the time it ran.
	Skipped int `json:"skipped"`
}

// Work runs the batch's first attempts.
func (w *IntentBatchWorker) Work(ctx context.Context, job *river.Job[IntentBatchArgs]) error {
	members, err := w.intents.store.queries.BatchOwned(ctx, w.pool, job.Args.IntentIDs, job.ID)
	if err != nil {
		return fmt.Errorf("error reading batch %d: %w", job.ID, err)
	}
	attemptCtx := context.WithValue(ctx, inBatchKey{}, true)
	var (
		mu      sync.Mutex
		out     = BatchOutput{Skipped: len(job.Args.IntentIDs) - len(members)}
		failed  error
		wg      sync.WaitGroup
		stopped bool
	)
	handOver := func(m intentdb.BatchMember, delay time.Duration) {
		// The intent's outcome, if any, is recorded already; a handover
		// must happen even while River stops the batch.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.intents.effectTimeout)
		defer cancel()
		ok, err := w.handOver(hctx, job, m, delay)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			// Left with the batch: River retries the batch, whose next
			// run takes the intent again.
			failed = errors.Join(failed, err)
		case ok:
			out.HandedOver++
		default:
			out.Skipped++
		}
	}
	for _, m := range members {
		// Once stopped, never take a slot again: a select with both cases
		// ready picks either, and a slot taken here would never be given
		// back.
		if !stopped && ctx.Err() == nil {
			select {
			case w.sem <- struct{}{}:
			case <-ctx.Done():
				stopped = true
			}
		} else {
			stopped = true
		}
		if stopped {
			// River is stopping the batch (its timeout, or a shutdown):
			// the intents not begun go on to jobs of their own, untouched.
			handOver(m, 0)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.intents.work(attemptCtx, jobRef{intentID: m.ID, queue: job.Queue, attempt: job.Attempt})
			<-w.sem
			if err == nil {
				mu.Lock()
				out.Ended++
				mu.Unlock()
				return
			}
			delay := handOverDelay
			if snooze := (*river.JobSnoozeError)(nil); errors.As(err, &snooze) {
				delay = snooze.Duration
			}
			handOver(m, delay)
		}()
	}
	wg.Wait()
	_ = river.RecordOutput(ctx, &out)
	if failed != nil {
		return failed
	}
	return nil
}

// handOver inserts a job of m's own, scheduled after delay, and points the
// intent at it, in one transaction: the intent is then the new job's and no
// longer the batch's.
func (w *IntentBatchWorker) handOver(ctx context.Context, job *river.Job[IntentBatchArgs], m intentdb.BatchMember, delay time.Duration) (bool, error) {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return false, err
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("error handing intent %d over: %w", m.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	res, err := client.InsertTx(ctx, tx, IntentArgs{IntentID: m.ID}, &river.InsertOpts{
		MaxAttempts: w.intents.MaxAttempts(),
		Metadata:    JobMetadata(m.Namespace, job.Queue),
		Queue:       job.Queue,
		ScheduledAt: time.Now().Add(delay),
	})
	if err != nil {
		return false, fmt.Errorf("error inserting the job of intent %d: %w", m.ID, err)
	}
	ok, err := w.intents.store.queries.HandOver(ctx, tx, m.ID, job.ID, res.Job.ID)
	if err != nil || !ok {
		// Not the batch's any more (re-dispatched), or terminal: the job
		// inserted is rolled back with the transaction.
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("error handing intent %d over: %w", m.ID, err)
	}
	w.logger.DebugContext(ctx, "intent handed over from its batch to a job of its own",
		slog.Int64("intent_id", m.ID), slog.Int64("job_id", res.Job.ID))
	return true, nil
}

// JobMetadata is an intent job's River metadata: whose intent, of which
// effect, so that River UI shows it without leaving. Never the key or the
// arguments, which can carry personal data.
func JobMetadata(namespace, effect string) []byte {
	b, _ := json.Marshal(struct { //nolint:errchkjson // two strings always encode
		Effect    string `json:"effect"`
		Namespace string `json:"namespace"`
	}{effect, namespace})
	return b
}

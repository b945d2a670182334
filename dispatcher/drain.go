package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/riverworker"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// drainer moves committed pending intents into River jobs.
type drainer struct {
	// approvalWebhook is Config.ApprovalWebhook: when set, each drain also
	// inserts a notice job for every intent newly awaiting approval.
	approvalWebhook string
	// batchFirstAttempts is the negation of Config.DisableBatchFirstAttempts.
	batchFirstAttempts bool
	batchSize          int
	effects            *effects.Registry
	logger             *slog.Logger
	maxAttempts        int
	metrics            *workers.Metrics
	pollInterval       time.Duration
	pool               *pgxpool.Pool
	// sessionPool holds the LISTEN connection (Config.SessionPool).
	sessionPool *pgxpool.Pool
	queries     *intentdb.Queries
	river       *river.Client[pgx.Tx]

	// beforeCommitFunc, when set by tests, runs inside the drain transaction
	// after the jobs were inserted and the intents marked, before commit.
	beforeCommitFunc func(ctx context.Context, tx pgx.Tx) error
}

func newDrainer(pool, sessionPool *pgxpool.Pool, client *river.Client[pgx.Tx], config *Config, maxAttempts int) *drainer {
	return &drainer{
		approvalWebhook:    config.ApprovalWebhook,
		batchFirstAttempts: !config.DisableBatchFirstAttempts,
		batchSize:          config.DrainBatchSize,
		effects:            config.Effects,
		logger:             config.Logger,
		maxAttempts:        maxAttempts,
		metrics:            config.Metrics,
		pollInterval:       config.DrainPollInterval,
		pool:               pool,
		sessionPool:        sessionPool,
		queries:            intentdb.New(config.Schema),
		river:              client,
	}
}

// drainOnce dispatches one batch: new intents from the stream, in commit
// order, and intents of the dispatch queue. It returns how many intents it
// took (invalid ones, which it failed, included) and the most it read from
// either source (drainAll drains again while one came back full). Three
// steps in one transaction: a read (readDrain) that locks what it takes, a
// plan (planJobs) that touches no database, and a write (writeDrain).
func (d *drainer) drainOnce(ctx context.Context) (dispatched, read int, _ error) {
	// READ COMMITTED whatever the server's default: the offset's lock
	// must read the newest offset, and each statement see what committed
	// before it (LockDrainOffset).
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, 0, fmt.Errorf("error beginning drain: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	r, err := d.readDrain(ctx, tx)
	if err != nil || r.idle {
		return 0, 0, err
	}
	plan := d.planJobs(r.batch)
	if err := d.writeDrain(ctx, tx, plan, &r.commit); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("error committing drain: %w", err)
	}
	// Counted once committed: a rolled-back drain handed nothing over.
	d.metrics.Drained.Add(float64(len(r.batch)))
	return len(r.batch), r.read, nil
}

// drainRead is what a drain read and locked: the intents to dispatch, the
// commit it started (the stream's offset, the queue's rows), and the most
// rows one source gave.
type drainRead struct {
	batch  []intentdb.Undispatched
	commit intentdb.DrainCommit
	read   int
	// idle is a read that found nothing and need write nothing.
	idle bool
}

// readDrain reads, in tx, the stream's new intents and the dispatch
// queue's, and locks those this drain dispatches.
func (d *drainer) readDrain(ctx context.Context, tx pgx.Tx) (*drainRead, error) {
	// The intents dispatched stay locked until this transaction commits
	// their jobs and marks, and the stream's offset with them, so no other
	// drain can dispatch them twice: the stream is read by one drain at a
	// time (its offset is locked for this transaction; another drain waits
	// for it, a few milliseconds), and an intent that is in the queue as
	// well is locked by whichever drain takes it first, the other finding
	// it dispatched.
	off, err := d.queries.LockDrainOffset(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("error locking the drain's offset: %w", err)
	}
	stream, err := d.queries.SelectStream(ctx, tx, off, d.batchSize)
	if err != nil {
		return nil, fmt.Errorf("error reading new intents: %w", err)
	}
	r := &drainRead{read: len(stream)} // the most rows of one source: a full one means more may wait
	taken := map[int64]bool{}
	if len(stream) < d.batchSize {
		// Every intent cur sees and prev does not is handed over: the next
		// drain reads from cur, with a snapshot of its own.
		r.commit.Offset = &intentdb.DrainOffset{Prev: off.Cur, TxID: "0"}
	} else {
		last := stream[len(stream)-1]
		r.commit.Offset = &intentdb.DrainOffset{Prev: off.Prev, Cur: off.Cur, TxID: last.TxID, ID: last.ID}
	}
	var mine []int64
	for _, s := range stream {
		switch {
		case !s.Pending:
			// Awaiting approval (its approval queues it), ended, or
			// dispatched another way.
		case !d.runs(s.Effect):
			// Another replica's effect: left to the queue, which each
			// drain reads for the effects it runs.
			r.commit.Queue = append(r.commit.Queue, s.ID)
		default:
			mine = append(mine, s.ID)
		}
	}
	locked, err := d.queries.LockUndispatched(ctx, tx, mine)
	if err != nil {
		return nil, fmt.Errorf("error locking new intents: %w", err)
	}
	for _, s := range stream {
		switch {
		case locked[s.ID]:
			r.batch = append(r.batch, s.Undispatched)
			taken[s.ID] = true
		case s.Pending && d.runs(s.Effect):
			// Held by another transaction, or settled since the read:
			// the queue takes it, or finds it settled.
			r.commit.Queue = append(r.commit.Queue, s.ID)
		}
	}
	queued, err := d.queries.SelectQueued(ctx, tx, d.effects.Names(), d.batchSize)
	if err != nil {
		return nil, fmt.Errorf("error selecting queued intents: %w", err)
	}
	r.read = max(r.read, len(queued))
	for _, q := range queued {
		r.commit.Dequeue = append(r.commit.Dequeue, q.ID)
		if q.Pending && !taken[q.ID] {
			r.batch = append(r.batch, q.Undispatched)
			taken[q.ID] = true
		}
	}
	// Nothing to write: with no intent between prev and this snapshot,
	// reading from prev again finds what reading from it would. An idle
	// poll writes nothing.
	r.idle = r.read == 0 && off.Fresh
	return r, nil
}

// drainPlan is what a drain writes: River's jobs (params) with the intents
// each runs (owners), and the intents failed before any job.
type drainPlan struct {
	params  []river.InsertManyParams
	owners  [][]int64
	badIDs  []int64
	badErrs []json.RawMessage
}

// planJobs decides, without the database, each intent's job: a job of its
// own, or a batch of its effect's first attempts, or none (an intent that
// fails validation now, having reached the table another way).
func (d *drainer) planJobs(batch []intentdb.Undispatched) *drainPlan {
	p := &drainPlan{}
	batches := map[string][]int64{} // by effect and namespace
	for _, u := range batch {
		effect, ok := d.effects.Get(u.Effect)
		if !ok {
			continue // selected by name: cannot happen
		}
		if !effects.AllowedIn(effect, u.Namespace) {
			// Written by the SQL function, which knows no effects: the
			// write side refuses it (see effects.AllowedIn).
			p.badIDs = append(p.badIDs, u.ID)
			p.badErrs = append(p.badErrs, intentdb.ErrorJSON(outbox.CodeUnknownEffect, fmt.Sprintf("effect %q is not enabled for namespace %q", u.Effect, u.Namespace)))
			continue
		}
		if err := effect.ValidateArgs(u.Args); err != nil {
			p.badIDs = append(p.badIDs, u.ID)
			p.badErrs = append(p.badErrs, intentdb.ErrorJSON(effects.CodeInvalidArgs, err.Error()))
			continue
		}
		// An effect in a shared queue is never batched: a batch job runs in
		// its effect's own queue.
		queue := effects.QueueOf(effect)
		if d.batchFirstAttempts && effects.GuaranteeOf(effect, u.Args) == effects.GuaranteeDeduplicated && !effects.AlwaysClaims(effect) && queue == u.Effect {
			// One batch per effect and namespace: the batch job's queue
			// is the effect and its metadata the namespace.
			k := u.Effect + "\x00" + u.Namespace
			batches[k] = append(batches[k], u.ID)
			continue
		}
		args := workers.IntentArgs{IntentID: u.ID}
		if queue != u.Effect {
			args.Effect = u.Effect
		}
		p.params = append(p.params, d.jobParams(args, u.Namespace, u.Effect, queue))
		p.owners = append(p.owners, []int64{u.ID})
	}
	for _, k := range slices.Sorted(maps.Keys(batches)) {
		effect, namespace, _ := strings.Cut(k, "\x00")
		if ids := batches[k]; len(ids) == 1 {
			// A batch of one costs what a job of its own does, and reads
			// better in River UI.
			p.params = append(p.params, d.jobParams(workers.IntentArgs{IntentID: ids[0]}, namespace, effect, effect))
		} else {
			// Batched effects have queues of their own (above).
			jp := d.jobParams(workers.IntentBatchArgs{IntentIDs: ids}, namespace, effect, effect)
			jp.InsertOpts.Metadata = riverworker.BatchJobMetadata(namespace, effect, len(ids))
			p.params = append(p.params, jp)
		}
		p.owners = append(p.owners, batches[k])
	}
	return p
}

// writeDrain inserts plan's jobs in tx, marks their intents, settles the
// queue and the stream's offset (commit), and fails the invalid intents.
func (d *drainer) writeDrain(ctx context.Context, tx pgx.Tx, plan *drainPlan, commit *intentdb.DrainCommit) error {
	if len(plan.params) > 0 {
		results, err := d.river.InsertManyTx(ctx, tx, plan.params)
		if err != nil {
			return fmt.Errorf("error inserting River jobs: %w", err)
		}
		if len(results) != len(plan.params) {
			return fmt.Errorf("River inserted %d jobs of %d", len(results), len(plan.params))
		}
		for i, r := range results {
			// Match jobs to intents by their args rather than trusting the
			// order of the results.
			var args struct {
				IntentID  int64   `json:"intent_id"`
				IntentIDs []int64 `json:"intent_ids"`
			}
			if err := json.Unmarshal(r.Job.EncodedArgs, &args); err != nil {
				return fmt.Errorf("error decoding inserted job: %w", err)
			}
			if args.IntentIDs == nil {
				args.IntentIDs = []int64{args.IntentID}
			}
			if !slices.Equal(args.IntentIDs, plan.owners[i]) {
				return fmt.Errorf("River returned job for intents %v at position of %v", args.IntentIDs, plan.owners[i])
			}
			for _, id := range plan.owners[i] {
				commit.IDs = append(commit.IDs, id)
				commit.JobIDs = append(commit.JobIDs, r.Job.ID)
			}
		}
	}
	if err := d.queries.CommitDrain(ctx, tx, commit); err != nil {
		return fmt.Errorf("error marking intents dispatched: %w", err)
	}
	if len(plan.badIDs) > 0 {
		if err := d.queries.FailInvalid(ctx, tx, plan.badIDs, plan.badErrs); err != nil {
			return fmt.Errorf("error failing invalid intents: %w", err)
		}
		d.logger.WarnContext(ctx, "intents failed validation at dispatch", slog.Int("count", len(plan.badIDs)))
	}
	if d.beforeCommitFunc != nil {
		if err := d.beforeCommitFunc(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// drainAll drains until a batch comes back short, then announces the
// intents newly awaiting approval. It returns how many intents it
// dispatched.
func (d *drainer) drainAll(ctx context.Context) (int, error) {
	total := 0
	for {
		n, read, err := d.drainOnce(ctx)
		total += n
		if err != nil {
			return total, err
		}
		if read < d.batchSize {
			break
		}
	}
	if d.approvalWebhook == "" {
		return total, nil
	}
	for {
		n, err := d.announceOnce(ctx)
		if err != nil || n < d.batchSize {
			return total, err
		}
	}
}

// announceOnce inserts a notice job for each of a batch of intents awaiting
// approval that were not announced yet, and marks them announced in the
// same transaction, so that each is announced once.
func (d *drainer) announceOnce(ctx context.Context) (int, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("error beginning announcement: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	rows, err := d.queries.SelectUnannounced(ctx, tx, d.batchSize)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	ids := make([]int64, len(rows))
	params := make([]river.InsertManyParams, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
		params[i] = river.InsertManyParams{
			Args: workers.ApprovalNoticeArgs{IntentID: r.ID},
			InsertOpts: &river.InsertOpts{
				MaxAttempts: d.maxAttempts,
				Metadata:    riverworker.JobMetadata(r.Namespace, r.Effect),
				// The webhook effect's queue: a slow receiver holds up
				// webhooks, not the maintenance jobs.
				Queue: "webhook",
			},
		}
	}
	if _, err := d.river.InsertManyTx(ctx, tx, params); err != nil {
		return 0, fmt.Errorf("error inserting approval notices: %w", err)
	}
	if err := d.queries.MarkAnnounced(ctx, tx, ids); err != nil {
		return 0, fmt.Errorf("error marking approvals announced: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("error committing announcement: %w", err)
	}
	return len(rows), nil
}

// run drains whenever woken by an enqueue's notification, and at least every
// pollInterval, until ctx ends.
func (d *drainer) run(ctx context.Context) {
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.listen(ctx, wake)
	}()
	defer func() { <-done }()

	timer := time.NewTimer(0) // drain once at start: intents may be waiting
	defer timer.Stop()
	backoff := 100 * time.Millisecond
	var lastWork time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
		n, err := d.drainAll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.logger.WarnContext(ctx, "drain failed, will retry", slog.String("error", err.Error()))
			timer.Reset(backoff)
			backoff = min(2*backoff, d.pollInterval)
			continue
		}
		backoff = 100 * time.Millisecond
		if n > 0 {
			lastWork = time.Now()
		}
		// While intents keep coming, poll every few milliseconds instead of
		// waiting to be woken: a session notifies at most once per
		// intentdb.NotifyWindow (see outbox_enqueue_try), so an enqueue
		// shortly after its session's last notification brings none. Its
		// session's previous notification woke a drain that found work;
		// polling for longer than the window after that catches it. This
		// also costs less than a wake-up per commit at high rates.
		timer.Stop()
		if time.Since(lastWork) < busyTail {
			timer.Reset(busyPollInterval)
		} else {
			timer.Reset(d.pollInterval)
		}
	}
}

const (
	// busyTail is how long the drain keeps polling after finding work:
	// longer than the window, plus room for the commit that follows the
	// decision not to notify.
	busyTail = 3 * intentdb.NotifyWindow
	// busyPollInterval is the drain's poll while busy. A poll that finds
	// nothing reads one page of a tiny partial index.
	busyPollInterval = 5 * time.Millisecond
)

// listen turns the enqueues' notifications into wake-ups until ctx ends.
// Wake-ups are coalesced in a channel of one: any number of enqueues during a
// drain cause exactly one more drain. A broken connection is replaced, and
// the poll covers the gap.
func (d *drainer) listen(ctx context.Context, wake chan<- struct{}) {
	intentdb.Listen(ctx, d.sessionPool, &intentdb.ListenerConfig{
		Channel: intentdb.ChannelPending(d.queries.Schema()),
		// Anything committed before LISTEN took effect is found by this
		// wake-up's drain.
		ListeningFunc: func() { signal(wake) },
		Logger:        d.logger,
		Name:          "drain",
		NotifyFunc:    func(string) { signal(wake) },
	})
}

// jobParams is the insertion of an intent job (or a batch of them) of
// namespace and effect, into queue.
func (d *drainer) jobParams(args river.JobArgs, namespace, effect, queue string) river.InsertManyParams {
	return river.InsertManyParams{
		Args: args,
		InsertOpts: &river.InsertOpts{
			MaxAttempts: d.maxAttempts,
			// For River UI: whose intent, of which effect, without
			// leaving it.
			Metadata: riverworker.JobMetadata(namespace, effect),
			Queue:    queue,
		},
	}
}

func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// runs reports whether this replica runs effect.
func (d *drainer) runs(effect string) bool {
	_, ok := d.effects.Get(effect)
	return ok
}

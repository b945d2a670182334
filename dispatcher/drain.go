package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/workers"
)

// drainer moves committed pending intents into River jobs.
type drainer struct {
	batchSize    int
	effects      *effects.Registry
	logger       *slog.Logger
	maxAttempts  int
	pollInterval time.Duration
	pool         *pgxpool.Pool
	river        *river.Client[pgx.Tx]
	schema       string

	sqlSelect, sqlMark, sqlInvalid string

	// beforeCommitFunc, when set by tests, runs inside the drain transaction
	// after the jobs were inserted and the intents marked, before commit.
	beforeCommitFunc func(ctx context.Context, tx pgx.Tx) error
}

func newDrainer(pool *pgxpool.Pool, client *river.Client[pgx.Tx], config *Config, maxAttempts int) *drainer {
	table := pgx.Identifier{config.Schema, "outbox_intent"}.Sanitize()
	channel := strings.ReplaceAll(config.Schema+".intent_changed", "'", "''")
	return &drainer{
		batchSize:    config.DrainBatchSize,
		effects:      config.Effects,
		logger:       config.Logger,
		maxAttempts:  maxAttempts,
		pollInterval: config.DrainPollInterval,
		pool:         pool,
		river:        client,
		schema:       config.Schema,
		// The partial index outbox_intent_undispatched holds exactly these
		// rows, in id order, so this reads only what it returns. SKIP LOCKED
		// lets another drain take the next batch instead of waiting.
		sqlSelect: `SELECT id, effect, args FROM ` + table + `
			WHERE job_id IS NULL AND state = 'pending'
			ORDER BY id
			LIMIT $1
			FOR UPDATE SKIP LOCKED`,
		// Dispatching is not a state change (the intent stays pending), so
		// updated_at is left alone and no notification fires.
		sqlMark: `UPDATE ` + table + ` t SET job_id = u.job_id
			FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id)
			WHERE t.id = u.id`,
		// Intents that reached the table without the library's validation
		// (raw SQL) and fail it end here, without any provider call.
		sqlInvalid: `WITH upd AS (
				UPDATE ` + table + ` t
				SET state = 'failed', error = u.error, completed_at = now(), updated_at = now()
				FROM unnest($1::bigint[], $2::jsonb[]) AS u(id, error)
				WHERE t.id = u.id
				RETURNING t.id
			), notified AS (
				SELECT pg_notify('` + channel + `', 'failed ' || string_agg(id::text, ','))
				FROM (SELECT id, (row_number() OVER ()) / 300 AS chunk FROM upd) c
				GROUP BY chunk
			)
			SELECT count(*) FROM notified`,
	}
}

// drainOnce dispatches one batch and returns how many intents it took.
func (d *drainer) drainOnce(ctx context.Context) (int, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("error beginning drain: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	rows, err := tx.Query(ctx, d.sqlSelect, d.batchSize)
	if err != nil {
		return 0, fmt.Errorf("error selecting intents to dispatch: %w", err)
	}
	var (
		ids      []int64
		params   []river.InsertManyParams
		badIDs   []int64
		badErrs  []string
		n        int
		maxTries = d.maxAttempts
	)
	for rows.Next() {
		var id int64
		var effectName string
		var args json.RawMessage
		if err := rows.Scan(&id, &effectName, &args); err != nil {
			rows.Close()
			return 0, fmt.Errorf("error reading intents to dispatch: %w", err)
		}
		n++
		effect, ok := d.effects.Get(effectName)
		if !ok {
			badIDs = append(badIDs, id)
			badErrs = append(badErrs, errorJSON("unknown_effect", fmt.Sprintf("effect %q is not enabled", effectName)))
			continue
		}
		if err := effect.ValidateArgs(args); err != nil {
			badIDs = append(badIDs, id)
			badErrs = append(badErrs, errorJSON("invalid_args", err.Error()))
			continue
		}
		ids = append(ids, id)
		params = append(params, river.InsertManyParams{
			Args:       workers.IntentArgs{IntentID: id},
			InsertOpts: &river.InsertOpts{Queue: effectName, MaxAttempts: maxTries},
		})
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("error reading intents to dispatch: %w", err)
	}
	if n == 0 {
		return 0, nil
	}

	if len(params) > 0 {
		results, err := d.river.InsertManyTx(ctx, tx, params)
		if err != nil {
			return 0, fmt.Errorf("error inserting River jobs: %w", err)
		}
		if len(results) != len(ids) {
			return 0, fmt.Errorf("River inserted %d jobs for %d intents", len(results), len(ids))
		}
		jobIDs := make([]int64, len(results))
		for i, r := range results {
			// Match jobs to intents by their args rather than trusting the
			// order of the results.
			var args workers.IntentArgs
			if err := json.Unmarshal(r.Job.EncodedArgs, &args); err != nil {
				return 0, fmt.Errorf("error decoding inserted job: %w", err)
			}
			if args.IntentID != ids[i] {
				return 0, fmt.Errorf("River returned job for intent %d at position of %d", args.IntentID, ids[i])
			}
			jobIDs[i] = r.Job.ID
		}
		if _, err := tx.Exec(ctx, d.sqlMark, ids, jobIDs); err != nil {
			return 0, fmt.Errorf("error marking intents dispatched: %w", err)
		}
	}
	if len(badIDs) > 0 {
		if _, err := tx.Exec(ctx, d.sqlInvalid, badIDs, badErrs); err != nil {
			return 0, fmt.Errorf("error failing invalid intents: %w", err)
		}
		d.logger.WarnContext(ctx, "intents failed validation at dispatch", slog.Int("count", len(badIDs)))
	}
	if d.beforeCommitFunc != nil {
		if err := d.beforeCommitFunc(ctx, tx); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("error committing drain: %w", err)
	}
	return n, nil
}

// drainAll drains until a batch comes back short.
func (d *drainer) drainAll(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := d.drainOnce(ctx)
		total += n
		if err != nil || n < d.batchSize {
			return total, err
		}
	}
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
		// enqueueNotifyWindow (see outbox_enqueue_try), so an enqueue
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
	// enqueueNotifyWindow is how long a session stays quiet after notifying
	// the drain; it is written into outbox_enqueue_try.
	enqueueNotifyWindow = time.Second
	// busyTail is how long the drain keeps polling after finding work:
	// longer than the window, plus room for the commit that follows the
	// decision not to notify.
	busyTail = 3 * enqueueNotifyWindow
	// busyPollInterval is the drain's poll while busy. A poll that finds
	// nothing reads one page of a tiny partial index.
	busyPollInterval = 5 * time.Millisecond
)

// listen holds a LISTEN connection and turns notifications into wake-ups.
// Wake-ups are coalesced in a channel of one: any number of enqueues during a
// drain cause exactly one more drain. A broken connection (Postgres restarted,
// backend terminated) is replaced; the poll covers the gap.
func (d *drainer) listen(ctx context.Context, wake chan<- struct{}) {
	channel := pgx.Identifier{d.schema + ".intent_pending"}.Sanitize()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := func() error {
			pooled, err := d.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			// A LISTENing connection must never go back to the pool.
			conn := pooled.Hijack()
			defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
			if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
				return err
			}
			backoff = 100 * time.Millisecond
			// Anything committed before LISTEN took effect is found by this
			// wake-up's drain.
			signal(wake)
			for {
				if _, err := conn.WaitForNotification(ctx); err != nil {
					return err
				}
				signal(wake)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		d.logger.WarnContext(ctx, "drain listener lost its connection, reconnecting", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func errorJSON(code, message string) string {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
	return string(b)
}

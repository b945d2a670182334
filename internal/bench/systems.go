package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// system is one side of the comparison, set up in a schema of its own.
type system interface {
	// insert commits one unit in its own transaction and returns its id.
	insert(ctx context.Context, i int) (id int64, err error)
	// completed delivers the ids of units as their River jobs complete.
	completed() <-chan int64
	// terminal delivers the ids of units as they reach their terminal
	// state, before their jobs complete; nil when that is completion.
	terminal() <-chan int64
	stop(ctx context.Context) error
}

// NoopArgs is the plain-River baseline's job.
type NoopArgs struct {
	N int `json:"n"`
}

// Kind implements river.JobArgs.
func (NoopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

// riverConfig is the baseline's River configuration. It is tuned like the
// dispatcher's River client (the same fetch cooldown, fetch poll interval and
// workers per queue), so that the comparison is of the work per unit, not of
// River's settings: with River's default 100 ms cooldown, 50 workers cap any
// queue at 500 jobs/s, and with its 1 s poll a run's last jobs may wait a
// second (dispatcher.Config.FetchPollInterval).
func riverConfig(schema string, workers int) *river.Config {
	return &river.Config{
		FetchCooldown:     dispatcher.FetchCooldownDefault,
		FetchPollInterval: dispatcher.FetchPollIntervalDefault,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Schema:            schema,
	}
}

type riverSystem struct {
	client *river.Client[pgx.Tx]
	pool   *pgxpool.Pool
	events <-chan *river.Event
	cancel func()
	out    chan int64
	// opts are each insert's options: unique by args, or none.
	opts *river.InsertOpts
	// noCallerTx inserts with Insert, River's own transaction.
	noCallerTx bool
}

func newRiverSystem(ctx context.Context, pool *pgxpool.Pool, schema string, kind Kind, cfg *Config) (*riverSystem, error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	rc := riverConfig(schema, cfg.Workers)
	rc.Workers = ws
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, err
	}
	s := &riverSystem{client: client, pool: pool, out: make(chan int64, 1024), noCallerTx: kind.NoCallerTx}
	if kind.Unique {
		s.opts = &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// start subscribes to completed jobs, whose ids are the units that
// completed, and starts the client.
func (s *riverSystem) start(ctx context.Context) error {
	s.events, s.cancel = s.client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 100_000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	go func() {
		defer close(s.out)
		for ev := range s.events {
			s.out <- ev.Job.ID
		}
	}()
	return s.client.Start(ctx)
}

func (s *riverSystem) insert(ctx context.Context, i int) (int64, error) {
	if s.noCallerTx {
		res, err := s.client.Insert(ctx, NoopArgs{N: i}, s.opts)
		if err != nil {
			return 0, err
		}
		return res.Job.ID, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	res, err := s.client.InsertTx(ctx, tx, NoopArgs{N: i}, s.opts)
	if err != nil {
		return 0, err
	}
	if res.UniqueSkippedAsDuplicate {
		return 0, fmt.Errorf("bench: job %d was taken for a duplicate", i)
	}
	return res.Job.ID, tx.Commit(ctx)
}

func (s *riverSystem) completed() <-chan int64 { return s.out }

func (s *riverSystem) terminal() <-chan int64 { return nil }

func (s *riverSystem) stop(ctx context.Context) error {
	err := s.client.Stop(ctx)
	s.cancel()
	return err
}

type outboxSystem struct {
	client *outbox.Client
	disp   *dispatcher.Dispatcher
	effect string
	pool   *pgxpool.Pool
	events <-chan *river.Event
	cancel func()
	out    chan int64
	run    int64
	// term receives the ids of intents that succeeded, from their state
	// changes' notifications; stopListen ends the listener.
	term       chan int64
	stopListen func()
	// noCallerTx enqueues with Enqueue (the HTTP API's way).
	noCallerTx bool
}

func newOutboxSystem(ctx context.Context, pool *pgxpool.Pool, schema, effect string, kind Kind, cfg *Config) (*outboxSystem, error) {
	guarantee := kind.Guarantee
	e, err := noop.New(&noop.Config{Name: effect, Guarantee: guarantee})
	if err != nil {
		return nil, err
	}
	reg, err := effects.NewRegistry(e)
	if err != nil {
		return nil, err
	}
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: reg, Schema: schema})
	if err != nil {
		return nil, err
	}
	disp, err := dispatcher.New(pool, &dispatcher.Config{
		DisableBatchFirstAttempts: !kind.BatchFirstAttempts,
		Effects:                   reg, Schema: schema, Workers: cfg.Workers,
	})
	if err != nil {
		return nil, err
	}
	s := &outboxSystem{client: client, disp: disp, effect: effect, pool: pool, out: make(chan int64, 1024), run: rand.Int64(), noCallerTx: kind.NoCallerTx,
		// Room for every unit: the listener must never block.
		term: make(chan int64, cfg.Count+warmUpUnits)}
	listenCtx, stopListen := context.WithCancel(context.WithoutCancel(ctx))
	listening := make(chan struct{})
	var once sync.Once
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		intentdb.Listen(listenCtx, pool, &intentdb.ListenerConfig{
			Channel:       intentdb.ChannelChanged(schema),
			Name:          "bench",
			ListeningFunc: func() { once.Do(func() { close(listening) }) },
			NotifyFunc: func(payload string) {
				if state, ids, ok := intentdb.ParseChanged(payload); ok && state == string(outbox.StateSucceeded) {
					for _, id := range ids {
						select {
						case s.term <- id:
						default: // more than the run's units: not ours
						}
					}
				}
			},
		})
	}()
	s.stopListen = func() { stopListen(); <-listenDone }
	select {
	case <-listening:
	case <-time.After(30 * time.Second):
		s.stopListen()
		return nil, errors.New("bench: the state-change listener did not start")
	}
	s.events, s.cancel = disp.River().SubscribeConfig(&river.SubscribeConfig{ChanSize: 100_000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	go func() {
		defer close(s.out)
		for ev := range s.events {
			// A noop never fails, so a batch job completes with every
			// intent of it ended.
			var args struct {
				IntentID  int64   `json:"intent_id"`
				IntentIDs []int64 `json:"intent_ids"`
			}
			switch ev.Job.Kind {
			case workers.IntentArgs{}.Kind():
				if json.Unmarshal(ev.Job.EncodedArgs, &args) == nil {
					s.out <- args.IntentID
				}
			case workers.IntentBatchArgs{}.Kind():
				if json.Unmarshal(ev.Job.EncodedArgs, &args) == nil {
					for _, id := range args.IntentIDs {
						s.out <- id
					}
				}
			}
		}
	}()
	if err := disp.Start(ctx); err != nil {
		s.cancel()
		s.stopListen()
		return nil, err
	}
	return s, nil
}

func (s *outboxSystem) insert(ctx context.Context, i int) (int64, error) {
	params := &outbox.EnqueueParams{
		Key:    fmt.Sprintf("bench-%x-%d", s.run, i),
		Effect: s.effect,
		Args:   map[string]any{"n": i},
	}
	if s.noCallerTx {
		res, err := s.client.Enqueue(ctx, params)
		if err != nil {
			return 0, err
		}
		return res.Intent.ID, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	res, err := s.client.EnqueueTx(ctx, tx, params)
	if err != nil {
		return 0, err
	}
	return res.Intent.ID, tx.Commit(ctx)
}

func (s *outboxSystem) completed() <-chan int64 { return s.out }

func (s *outboxSystem) terminal() <-chan int64 { return s.term }

func (s *outboxSystem) stop(ctx context.Context) error {
	err := s.disp.Stop(ctx)
	s.cancel()
	s.stopListen()
	return err
}

// handWrittenSystem is what a River user writes by hand for the same job:
// an intents table with a unique key, a row inserted together with River's
// InsertTx in the caller's transaction, and a worker that records the
// outcome by updating the row. It has none of outbox's guarantees (no
// fencing, no lost-outcome rule, no duplicate answer beyond the unique
// index), so it is the floor a River user starts from.
type handWrittenSystem struct {
	riverSystem
	schema string
	run    int64
}

// HandWrittenArgs is the hand-written outbox's job: the row's id.
type HandWrittenArgs struct {
	IntentID int64 `json:"intent_id"`
}

// Kind implements river.JobArgs.
func (HandWrittenArgs) Kind() string { return "bench_hand_written" }

type handWrittenWorker struct {
	river.WorkerDefaults[HandWrittenArgs]
	pool   *pgxpool.Pool
	update string
}

// Work records the outcome, once: a re-run finds the row done.
func (w *handWrittenWorker) Work(ctx context.Context, job *river.Job[HandWrittenArgs]) error {
	_, err := w.pool.Exec(ctx, w.update, job.Args.IntentID)
	return err
}

func newHandWrittenSystem(ctx context.Context, pool *pgxpool.Pool, schema string, cfg *Config) (*handWrittenSystem, error) {
	table := pgx.Identifier{schema, "hand_written_intent"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (
		id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		key        text NOT NULL UNIQUE,
		args       jsonb NOT NULL,
		state      text NOT NULL DEFAULT 'pending',
		result     jsonb,
		created_at timestamptz NOT NULL DEFAULT now(),
		updated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("bench: error creating the hand-written intents table: %w", err)
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &handWrittenWorker{pool: pool,
		update: `UPDATE ` + table + ` SET state = 'succeeded', result = '{}', updated_at = now() WHERE id = $1 AND state = 'pending'`})
	rc := riverConfig(schema, cfg.Workers)
	rc.Workers = ws
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, err
	}
	s := &handWrittenSystem{riverSystem: riverSystem{client: client, pool: pool, out: make(chan int64, 1024)}, schema: schema, run: rand.Int64()}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// insert records the row and its job in one caller's transaction; a key
// already recorded inserts nothing (the unique index answers).
func (s *handWrittenSystem) insert(ctx context.Context, i int) (int64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO `+pgx.Identifier{s.schema, "hand_written_intent"}.Sanitize()+` (key, args) VALUES ($1, $2)
		ON CONFLICT (key) DO NOTHING RETURNING id`, fmt.Sprintf("bench-%x-%d", s.run, i), map[string]any{"n": i}).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("bench: error inserting the hand-written intent: %w", err)
	}
	res, err := s.client.InsertTx(ctx, tx, HandWrittenArgs{IntentID: id}, nil)
	if err != nil {
		return 0, err
	}
	return res.Job.ID, tx.Commit(ctx)
}

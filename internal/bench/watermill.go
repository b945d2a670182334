package bench

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
)

// watermillTopic is the watermill-sql lane's topic.
const watermillTopic = "bench"

// watermillSystem is Watermill's transactional outbox on PostgreSQL, as a
// Watermill user sets it up: watermill-sql's log schema (one table per
// topic, indexed on (transaction_id xid8, offset) only, read in commit
// order below pg_snapshot_xmin(pg_current_snapshot())), its offsets
// adapter, a publisher on the caller's transaction, and a subscriber whose
// handler dedupes on the consumer side: it inserts the message's key into
// a processed-keys table in the transaction the subscriber reads and acks
// in, and acts only when the key was new.
//
// A consumer group's subscriber handles its messages one at a time (its
// offsets row is locked for each batch it reads), so the lane runs one
// subscriber where River runs Config.Workers workers; the callers are the
// same. It has no notifications: it polls every 10 ms when idle, River's
// fetch cooldown (dispatcher.FetchCooldownDefault), and reads batches of
// 100 (SubscribeBatchSize's default).
//
// A unit counts when the subscriber's transaction that handled it commits:
// its key recorded and the offset past it.
type watermillSystem struct {
	pool      *pgxpool.Pool
	schema    wmsql.DefaultPostgreSQLSchema
	processed string
	run       int64
	sub       *wmsql.Subscriber
	out       chan int64
	cancel    context.CancelFunc
	done      chan struct{}

	mu      sync.Mutex
	failure error
}

func newWatermillSystem(ctx context.Context, pool *pgxpool.Pool, schema string, cfg *Config) (*watermillSystem, error) {
	s := &watermillSystem{
		pool: pool,
		schema: wmsql.DefaultPostgreSQLSchema{
			GenerateMessagesTableName: func(topic string) string { return pgx.Identifier{schema, "watermill_" + topic}.Sanitize() },
		},
		processed: pgx.Identifier{schema, "watermill_processed"}.Sanitize(),
		run:       rand.Int64(),
		out:       make(chan int64, cfg.Count+warmUpUnits),
		done:      make(chan struct{}),
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+s.processed+` (key text PRIMARY KEY)`); err != nil {
		return nil, fmt.Errorf("bench: error creating the processed keys table: %w", err)
	}
	db := &watermillBeginner{PgxBeginner: wmsql.PgxBeginner{Conn: pool}, out: s.out}
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
		ConsumerGroup:  "bench",
		PollInterval:   dispatcher.FetchCooldownDefault,
		SchemaAdapter:  s.schema,
		OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: func(topic string) string { return pgx.Identifier{schema, "watermill_offsets_" + topic}.Sanitize() }},
		// Creates the topic's log and offsets tables.
		InitializeSchema: true,
	}, nil)
	if err != nil {
		return nil, err
	}
	s.sub = sub
	subCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	msgs, err := sub.Subscribe(subCtx, watermillTopic)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(s.done)
		for msg := range msgs {
			if err := s.handle(msg); err != nil {
				s.mu.Lock()
				s.failure = errors.Join(s.failure, err)
				s.mu.Unlock()
				msg.Nack()
				continue
			}
			msg.Ack()
		}
	}()
	return s, nil
}

// watermillMessage is the lane's payload.
type watermillMessage struct {
	N int `json:"n"`
}

// handle is the handler a Watermill user writes for an effect that must
// happen once: the message's key is recorded in the subscriber's own
// transaction (committed with the offset), and a key seen before is a
// redelivery, skipped.
func (s *watermillSystem) handle(msg *message.Message) error {
	tx, ok := wmsql.TxFromContext(msg.Context())
	if !ok {
		return errors.New("bench: no subscriber transaction in the message's context")
	}
	var m watermillMessage
	if err := json.Unmarshal(msg.Payload, &m); err != nil {
		return err
	}
	res, err := tx.ExecContext(msg.Context(), `INSERT INTO `+s.processed+` (key) VALUES ($1) ON CONFLICT DO NOTHING`, msg.UUID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // handled before: a redelivery
	}
	// The effect, a no-op, would run here.
	tx.(*watermillTx).handled = append(tx.(*watermillTx).handled, int64(m.N))
	return nil
}

// insert publishes one message in a caller's transaction, keyed like the
// other lanes' units; its id is i.
func (s *watermillSystem) insert(ctx context.Context, i int) (int64, error) {
	payload, err := json.Marshal(watermillMessage{N: i})
	if err != nil {
		return 0, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// A publisher on the caller's transaction, as Watermill's outbox
	// examples make one for each.
	pub, err := wmsql.NewPublisher(wmsql.TxFromPgx(tx), wmsql.PublisherConfig{SchemaAdapter: s.schema}, nil)
	if err != nil {
		return 0, err
	}
	msg := message.NewMessage(fmt.Sprintf("bench-%x-%d", s.run, i), payload)
	msg.SetContext(ctx)
	if err := pub.Publish(watermillTopic, msg); err != nil {
		return 0, err
	}
	return int64(i), tx.Commit(ctx)
}

func (s *watermillSystem) completed() <-chan int64 { return s.out }

func (s *watermillSystem) terminal() <-chan int64 { return nil }

func (s *watermillSystem) stop(context.Context) error {
	err := s.sub.Close()
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(err, s.failure)
}

// watermillBeginner is watermill-sql's pgx adapter whose transactions
// report the units they handled once they commit.
type watermillBeginner struct {
	wmsql.PgxBeginner
	out chan<- int64
}

// BeginTx implements wmsql.Beginner.
func (b *watermillBeginner) BeginTx(ctx context.Context, opts *stdsql.TxOptions) (wmsql.Tx, error) {
	tx, err := b.PgxBeginner.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &watermillTx{Tx: tx, out: b.out}, nil
}

// watermillTx is a subscriber's transaction and the units its handler
// handled in it.
type watermillTx struct {
	wmsql.Tx
	out     chan<- int64
	handled []int64
}

// Commit implements wmsql.Tx: the handled units count once durable.
func (t *watermillTx) Commit() error {
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	for _, id := range t.handled {
		t.out <- id
	}
	return nil
}

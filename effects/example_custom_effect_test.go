package effects_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/outboxtest"
)

// smsEffect sends a text message through a provider that dedupes on an
// idempotency key for 24 hours, so it declares GuaranteeDeduplicated: after
// a lost outcome the worker may send again with the same provider key.
// docs/effects.md explains how to choose a guarantee.
type smsEffect struct {
	provider *fakeSMSProvider
}

type smsArgs struct {
	To   string `json:"to"`
	Text string `json:"text"`
}

func (smsEffect) Name() string                 { return "sms" }
func (smsEffect) Guarantee() effects.Guarantee { return effects.GuaranteeDeduplicated }
func (smsEffect) DedupeWindow() time.Duration  { return 24 * time.Hour }
func (e smsEffect) ValidateArgs(raw json.RawMessage) error {
	var args smsArgs
	if err := json.Unmarshal(raw, &args); err != nil {
		return &effects.ArgError{Message: "must be an object with to and text"}
	}
	if args.To == "" || args.To[0] != '+' {
		return &effects.ArgError{Field: "to", Message: "must be a phone number in E.164 form, like +15551234567"}
	}
	if args.Text == "" || len(args.Text) > 160 {
		return &effects.ArgError{Field: "text", Message: "must be 1 to 160 characters"}
	}
	return nil
}

func (e smsEffect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	var args smsArgs
	if err := json.Unmarshal(req.Args, &args); err != nil {
		return nil, effects.Permanent("invalid_args", err)
	}
	id, err := e.provider.send(ctx, req.ProviderKey, args.To, args.Text)
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && !netErr.Timeout():
		// Refused before anything was sent: retried with River's backoff.
		return nil, effects.NotSent("connection_failed", err)
	case err != nil:
		// A timeout after sending: the provider may have acted. The
		// worker retries with the same provider key, which it dedupes.
		return nil, effects.Ambiguous("timeout", err)
	}
	return json.Marshal(map[string]string{"message_id": id})
}

// fakeSMSProvider stands in for the provider: it dedupes on the key and
// counts the messages it really sent.
type fakeSMSProvider struct {
	mu   sync.Mutex
	sent map[string]string // provider key -> message id
}

func (p *fakeSMSProvider) send(_ context.Context, key, _, _ string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.sent[key]; ok {
		return id, nil
	}
	id := fmt.Sprintf("msg_%d", len(p.sent)+1)
	p.sent[key] = id
	return id, nil
}

// Write an effect of your own, register it, run the dispatcher in your
// process, and wait for an intent's outcome.
func Example_customEffect() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	t := outboxtest.NewExampleTB() // in a test, the test's *testing.T
	defer t.Close()
	schema := outboxtest.MigrateSchema(ctx, t, pool)

	provider := &fakeSMSProvider{sent: map[string]string{}}
	registry, err := effects.NewRegistry(smsEffect{provider: provider})
	if err != nil {
		panic(err)
	}

	d, err := dispatcher.New(pool, &dispatcher.Config{Effects: registry, Schema: schema})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer d.Stop(ctx) //nolint:errcheck // the example's end

	client, err := outbox.NewClient(pool, &outbox.Config{Effects: registry, Schema: schema})
	if err != nil {
		panic(err)
	}

	// With Effects set, bad arguments are refused before anything is
	// written, naming the field.
	_, err = client.EnqueueTx(ctx, pool, &outbox.EnqueueParams{Key: "k", Effect: "sms", Args: map[string]any{"to": "5551234567", "text": "hi"}})
	fmt.Println(err)

	for range 2 { // the second is a retry: one message
		tx, err := pool.Begin(ctx)
		if err != nil {
			panic(err)
		}
		if _, err := client.EnqueueTx(ctx, tx, &outbox.EnqueueParams{
			Key:    "appointment-42-reminder",
			Effect: "sms",
			Args:   smsArgs{To: "+15551234567", Text: "See you at 10:00"},
		}); err != nil {
			panic(err)
		}
		if err := tx.Commit(ctx); err != nil {
			panic(err)
		}
	}

	// Wait is woken by the state change's notification; it never polls.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	intent, err := client.Wait(waitCtx, outbox.NamespaceDefault, "appointment-42-reminder")
	if err != nil {
		panic(err)
	}
	fmt.Println(intent.State, string(intent.Result), "messages sent:", len(provider.sent))

	// Output:
	// invalid_args: args.to: must be a phone number in E.164 form, like +15551234567
	// succeeded {"message_id": "msg_1"} messages sent: 1
}

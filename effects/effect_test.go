package effects_test

import (
	"context"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
)

// An effect's name is its River queue: every name ValidName accepts must
// be one River accepts, or serve refuses to start after effects check
// passed.
func TestValidName(t *testing.T) {
	t.Parallel()

	valid := []string{"a", "charge", "pay_now", "send_email_v2", "x1_2_3", strings.Repeat("a", 64)}
	invalid := []string{
		"", "pay__now", "pay_now_", "_pay", "Pay", "2fa", "pay-now", "pay.now", "pay now",
		"pay|now", strings.Repeat("a", 65),
	}
	for _, name := range valid {
		require.True(t, effects.ValidName(name), name)
		require.NoError(t, riverQueueName(name), name)
	}
	for _, name := range invalid {
		require.False(t, effects.ValidName(name), name)
	}
	// River refuses these too: a name is never accepted here and refused
	// there.
	for _, name := range []string{"pay__now_", "pay_now_", "pay__now"} {
		require.ErrorContains(t, riverQueueName(name), "queue name is invalid", name)
	}
}

// riverQueueName checks name as River's client does a queue's.
func riverQueueName(name string) error {
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[noopArgs]) error { return nil }))
	_, err := river.NewClient(riverpgxv5.New(nil), &river.Config{
		Queues:  map[string]river.QueueConfig{name: {MaxWorkers: 1}},
		Workers: workers,
	})
	if err != nil && strings.Contains(err.Error(), "database pool") {
		return nil // the queues passed; the missing pool is checked after them
	}
	return err
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

func TestProviderObjectID(t *testing.T) {
	t.Parallel()

	for result, want := range map[string]string{
		`{"id": "pi_123", "status": "succeeded"}`:            "pi_123",
		`{"ticket_id": 42, "url": "https://z/42"}`:           "42",
		`{"ticket_id": 12345678901234567891}`:                "12345678901234567891",
		`{"message_id": "<obx_1@x>"}`:                        "<obx_1@x>",
		`{"status": 200}`:                                    "",
		`{"b_id": "second", "a_id": "first"}`:                "first",
		`{"id": {"nested": true}, "payment_intent_id": "p"}`: "p",
		`{"id": "", "ticket_id": 7}`:                         "7",
		`not json`:                                           "",
		``:                                                   "",
	} {
		require.Equal(t, want, effects.ProviderObjectID([]byte(result)), result)
	}
}

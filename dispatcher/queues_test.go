package dispatcher

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
)

// queueEffect is an effect that only names itself and, optionally, a queue
// and its size: effectQueues reads nothing else.
type queueEffect struct {
	name, queue string
	workers     int
}

func (e *queueEffect) Name() string                       { return e.name }
func (e *queueEffect) Guarantee() effects.Guarantee       { return effects.GuaranteeDeduplicated }
func (e *queueEffect) ValidateArgs(json.RawMessage) error { return nil }
func (e *queueEffect) Execute(context.Context, *effects.Request) (json.RawMessage, error) {
	return nil, nil
}

// sharedEffect is a queueEffect in a queue shared with others
// (effects.Queuer), sized (effects.QueueSizer) when workers is set.
type sharedEffect struct{ queueEffect }

func (e *sharedEffect) Queue() string { return e.queue }
func (e *sharedEffect) Workers() int  { return e.workers }

var (
	_ effects.Queuer     = (*sharedEffect)(nil)
	_ effects.QueueSizer = (*sharedEffect)(nil)
)

func TestEffectQueues(t *testing.T) {
	t.Parallel()
	shared := func(name, queue string, workers int) effects.Effect {
		return &sharedEffect{queueEffect{name: name, queue: queue, workers: workers}}
	}
	own := func(name string) effects.Effect { return &queueEffect{name: name} }
	cases := []struct {
		name    string
		effects []effects.Effect
		want    map[string]int // queue -> workers
		err     string
	}{
		{name: "OwnQueues", effects: []effects.Effect{own("charge"), own("email")},
			want: map[string]int{QueueMaintenance: 1, "charge": 50, "email": 50}},
		{name: "SharedAndSized", effects: []effects.Effect{shared("notes_a", "upstream_notes", 8), shared("notes_b", "upstream_notes", 8)},
			want: map[string]int{QueueMaintenance: 1, "upstream_notes": 8}},
		{name: "SharedUnsizedTakesTheDefault", effects: []effects.Effect{shared("x_a", "upstream_x", 0)},
			want: map[string]int{QueueMaintenance: 1, "upstream_x": 50}},
		{name: "OwnQueueNamedByASharedOne", effects: []effects.Effect{own("upstream_notes"), shared("notes_a", "upstream_notes", 2)},
			err: `River queue "upstream_notes" would run both`},
		{name: "TheMaintenanceQueue", effects: []effects.Effect{own(QueueMaintenance)},
			err: "the maintenance jobs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			registry, err := effects.NewRegistry(tc.effects...)
			require.NoError(t, err)
			queues, err := effectQueues(registry, 50)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			got := map[string]int{}
			for q, cfg := range queues {
				got[q] = cfg.MaxWorkers
			}
			require.Equal(t, tc.want, got)
		})
	}
}

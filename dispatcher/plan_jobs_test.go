package dispatcher

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/workers"
)

// planEffect is a queueEffect with a guarantee, arguments it refuses
// ({"bad": true}) and, for scoped, the namespaces that may use it.
type planEffect struct {
	queueEffect
	guarantee effects.Guarantee
	claims    bool
}

func (e *planEffect) Guarantee() effects.Guarantee { return e.guarantee }
func (e *planEffect) AlwaysClaim() bool            { return e.claims }
func (e *planEffect) ValidateArgs(args json.RawMessage) error {
	var a struct {
		Bad bool `json:"bad"`
	}
	if json.Unmarshal(args, &a) == nil && a.Bad {
		return &effects.ArgError{Field: "bad", Message: "is refused"}
	}
	return nil
}

// planScopedEffect is a planEffect only namespace shop may use.
type planScopedEffect struct{ planEffect }

func (e *planScopedEffect) Namespaces() []string { return []string{"shop"} }

// sharedPlanEffect is a planEffect in a queue shared with others.
type sharedPlanEffect struct{ planEffect }

func (e *sharedPlanEffect) Queue() string { return e.queue }

var (
	_ effects.AlwaysClaimer   = (*planEffect)(nil)
	_ effects.NamespaceScoper = (*planScopedEffect)(nil)
	_ effects.Queuer          = (*sharedPlanEffect)(nil)
)

// TestPlanJobs is the drain's plan, one situation a case, without a
// database: which intents share a batch job, which get a job of their own
// (and in which queue), and which are failed before any job.
func TestPlanJobs(t *testing.T) {
	t.Parallel()
	dedupe := &planEffect{queueEffect: queueEffect{name: "charge"}, guarantee: effects.GuaranteeDeduplicated}
	atMostOnce := &planEffect{queueEffect: queueEffect{name: "email"}, guarantee: effects.GuaranteeAtMostOnce}
	claimed := &planEffect{queueEffect: queueEffect{name: "claimed"}, guarantee: effects.GuaranteeDeduplicated, claims: true}
	scoped := &planScopedEffect{planEffect{queueEffect: queueEffect{name: "scoped"}, guarantee: effects.GuaranteeDeduplicated}}
	shared := &sharedPlanEffect{planEffect{queueEffect: queueEffect{name: "notes_create", queue: "upstream_notes"}, guarantee: effects.GuaranteeDeduplicated}}
	registry, err := effects.NewRegistry(dedupe, atMostOnce, claimed, scoped, shared)
	require.NoError(t, err)

	intent := func(id int64, namespace, effect, args string) intentdb.Undispatched {
		return intentdb.Undispatched{ID: id, Namespace: namespace, Effect: effect, Args: json.RawMessage(args)}
	}
	// job is one planned job as the test reads it.
	type job struct {
		Kind  string
		Queue string
		IDs   []int64
		// Effect is IntentArgs.Effect: set when the queue is not the
		// effect's own.
		Effect string
	}
	cases := []struct {
		name    string
		batched bool
		batch   []intentdb.Undispatched
		jobs    []job
		bad     []int64
		badCode string
	}{
		{name: "DeduplicatedBatchedByNamespace", batched: true,
			batch: []intentdb.Undispatched{intent(1, "a", "charge", `{}`), intent(2, "a", "charge", `{}`), intent(3, "b", "charge", `{}`)},
			jobs:  []job{{Kind: "outbox_intent_batch", Queue: "charge", IDs: []int64{1, 2}}, {Kind: "outbox_intent", Queue: "charge", IDs: []int64{3}}}},
		{name: "BatchesOff", batched: false,
			batch: []intentdb.Undispatched{intent(1, "a", "charge", `{}`), intent(2, "a", "charge", `{}`)},
			jobs:  []job{{Kind: "outbox_intent", Queue: "charge", IDs: []int64{1}}, {Kind: "outbox_intent", Queue: "charge", IDs: []int64{2}}}},
		{name: "AtMostOnceNeverBatched", batched: true,
			batch: []intentdb.Undispatched{intent(1, "a", "email", `{}`), intent(2, "a", "email", `{}`)},
			jobs:  []job{{Kind: "outbox_intent", Queue: "email", IDs: []int64{1}}, {Kind: "outbox_intent", Queue: "email", IDs: []int64{2}}}},
		{name: "AlwaysClaimedNeverBatched", batched: true,
			batch: []intentdb.Undispatched{intent(1, "a", "claimed", `{}`), intent(2, "a", "claimed", `{}`)},
			jobs:  []job{{Kind: "outbox_intent", Queue: "claimed", IDs: []int64{1}}, {Kind: "outbox_intent", Queue: "claimed", IDs: []int64{2}}}},
		{name: "SharedQueueNamesItsEffect", batched: true,
			batch: []intentdb.Undispatched{intent(1, "a", "notes_create", `{}`), intent(2, "a", "notes_create", `{}`)},
			jobs: []job{{Kind: "outbox_intent", Queue: "upstream_notes", IDs: []int64{1}, Effect: "notes_create"},
				{Kind: "outbox_intent", Queue: "upstream_notes", IDs: []int64{2}, Effect: "notes_create"}}},
		{name: "InvalidArgsFailed", batched: true,
			batch: []intentdb.Undispatched{intent(1, "a", "charge", `{"bad": true}`), intent(2, "a", "charge", `{}`)},
			jobs:  []job{{Kind: "outbox_intent", Queue: "charge", IDs: []int64{2}}}, bad: []int64{1}, badCode: effects.CodeInvalidArgs},
		{name: "NamespaceNotAllowedFailed", batched: true,
			batch: []intentdb.Undispatched{intent(1, "other", "scoped", `{}`), intent(2, "shop", "scoped", `{}`)},
			jobs:  []job{{Kind: "outbox_intent", Queue: "scoped", IDs: []int64{2}}}, bad: []int64{1}, badCode: "unknown_effect"},
		{name: "Nothing", batched: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &drainer{batchFirstAttempts: tc.batched, effects: registry, maxAttempts: 7}
			plan := d.planJobs(tc.batch)
			var got []job
			for i, p := range plan.params {
				j := job{Kind: p.Args.Kind(), Queue: p.InsertOpts.Queue, IDs: plan.owners[i]}
				require.Equal(t, 7, p.InsertOpts.MaxAttempts)
				switch a := p.Args.(type) {
				case workers.IntentArgs:
					require.Equal(t, []int64{a.IntentID}, plan.owners[i])
					j.Effect = a.Effect
				case workers.IntentBatchArgs:
					require.Equal(t, a.IntentIDs, plan.owners[i])
				default:
					require.FailNow(t, "unexpected job args", "%T", a)
				}
				got = append(got, j)
			}
			require.Equal(t, tc.jobs, got)
			require.Equal(t, tc.bad, plan.badIDs)
			for _, e := range plan.badErrs {
				var stored struct {
					Code string `json:"code"`
				}
				require.NoError(t, json.Unmarshal(e, &stored))
				require.Equal(t, tc.badCode, stored.Code)
			}
		})
	}
}

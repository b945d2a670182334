package outboxtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
)

// testingT is the part of testing.TB that the assertions use. The exported
// functions take a testing.TB; the unexported ones take this, so that this
// package's tests can check with a fake that an assertion fails when it
// should.
type testingT interface {
	FailNow()
	Helper()
	Log(args ...any)
}

// ExpectedIntent describes an intent for RequireEnqueued and
// RequireNotEnqueued. Every field set must match, as an AND; a field left at
// its zero value matches anything (but Namespace, which defaults).
type ExpectedIntent struct {
	// Args are the intent's expected arguments, compared as JSON: they are
	// marshalled as EnqueueParams.Args is, so that a map, a struct or a
	// json.RawMessage with the same JSON value match whatever key order or
	// number spelling was stored. Defaults to nil: any arguments.
	Args any

	// Effect is the intent's expected effect. Defaults to empty: any effect.
	Effect string

	// Key is the intent's expected idempotency key. Defaults to empty: any
	// key, among the namespace's newest 10,000 intents (of Effect, when
	// set).
	Key string

	// Namespace is the namespace looked in. Defaults to
	// outbox.NamespaceDefault.
	Namespace string

	// State is the intent's expected state. Defaults to empty: any state.
	State outbox.State
}

// listLimit bounds how many intents of a namespace the assertions read when
// no key is given: more than a test enqueues.
const listLimit = 10_000

// listedMax is how many of the intents found a failure message lists.
const listedMax = 10

// RequireEnqueued requires that exactly one intent committed in schema
// matches expected, failing the test otherwise, and returns it for further
// assertions. The failure message lists the intents found.
//
//	intent := outboxtest.RequireEnqueued(ctx, t, pool, schema, &outboxtest.ExpectedIntent{
//		Key:    "order-1234-charge",
//		Effect: "charge",
//	})
//
// See RequireEnqueuedTx to look in a transaction, before it commits.
func RequireEnqueued(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string, expected *ExpectedIntent) *outbox.Intent {
	tb.Helper()
	return requireEnqueued(ctx, tb, pool, schema, expected)
}

// RequireEnqueuedTx is RequireEnqueued as tx sees the intents: an intent tx
// enqueued is found before tx commits, so that a test can check what the
// code under test enqueued in its transaction and then roll it back.
func RequireEnqueuedTx(ctx context.Context, tb testing.TB, tx outbox.Executor, schema string, expected *ExpectedIntent) *outbox.Intent {
	tb.Helper()
	return requireEnqueued(ctx, tb, tx, schema, expected)
}

func requireEnqueued(ctx context.Context, t testingT, q intentdb.Querier, schema string, expected *ExpectedIntent) *outbox.Intent {
	t.Helper()
	intent, failure, err := matchOne(ctx, q, schema, expected)
	if err != nil {
		failuref(t, "Internal failure: %s", err)
		return nil
	}
	if failure != "" {
		failuref(t, "%s", failure)
		return nil
	}
	return intent
}

// matchOne returns the one intent that matches expected, or says why there
// is not exactly one.
func matchOne(ctx context.Context, q intentdb.Querier, schema string, expected *ExpectedIntent) (*outbox.Intent, string, error) {
	found, matching, err := find(ctx, q, schema, expected)
	if err != nil {
		return nil, "", err
	}
	switch {
	case len(matching) == 1:
		return matching[0], "", nil
	case len(matching) > 1:
		return nil, fmt.Sprintf("%d intents match %s, expected one (give a Key to tell them apart):\n%s",
			len(matching), describe(expected), list(matching)), nil
	case len(found) == 0:
		return nil, fmt.Sprintf("No intent matches %s: none found in namespace %q%s",
			describe(expected), namespace(expected), scope(expected)), nil
	default:
		return nil, fmt.Sprintf("No intent matches %s; found in namespace %q%s:\n%s",
			describe(expected), namespace(expected), scope(expected), list(found)), nil
	}
}

// RequireManyEnqueued requires that each of expected matches exactly one
// intent committed in schema, each a different one, and that they were
// enqueued in the order given, failing the test otherwise; it returns them
// in that order. Intents that no expectation names are ignored, as
// River's rivertest.RequireManyInserted ignores other jobs.
//
//	intents := outboxtest.RequireManyEnqueued(ctx, t, pool, schema, []*outboxtest.ExpectedIntent{
//		{Key: "order-1234-charge", Effect: "charge"},
//		{Key: "order-1234-email", Effect: "email"},
//	})
//
// See RequireManyEnqueuedTx to look in a transaction, before it commits.
func RequireManyEnqueued(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string, expected []*ExpectedIntent) []*outbox.Intent {
	tb.Helper()
	return requireManyEnqueued(ctx, tb, pool, schema, expected)
}

// RequireManyEnqueuedTx is RequireManyEnqueued as tx sees the intents,
// including those tx enqueued and has not committed.
func RequireManyEnqueuedTx(ctx context.Context, tb testing.TB, tx outbox.Executor, schema string, expected []*ExpectedIntent) []*outbox.Intent {
	tb.Helper()
	return requireManyEnqueued(ctx, tb, tx, schema, expected)
}

func requireManyEnqueued(ctx context.Context, t testingT, q intentdb.Querier, schema string, expected []*ExpectedIntent) []*outbox.Intent {
	t.Helper()
	if len(expected) == 0 {
		failuref(t, "No intent expected: give RequireManyEnqueued at least one, or use RequireNotEnqueued")
		return nil
	}
	intents := make([]*outbox.Intent, len(expected))
	for i, e := range expected {
		intent, failure, err := matchOne(ctx, q, schema, e)
		if err != nil {
			failuref(t, "Internal failure: %s", err)
			return nil
		}
		if failure != "" {
			failuref(t, "Expected intent %d of %d: %s", i+1, len(expected), failure)
			return nil
		}
		for j := range i {
			if intents[j].ID == intent.ID && intents[j].Namespace == intent.Namespace {
				failuref(t, "Expected intents %d and %d (%s and %s) match the same intent:\n%s",
					j+1, i+1, describe(expected[j]), describe(e), list([]*outbox.Intent{intent}))
				return nil
			}
		}
		intents[i] = intent
	}
	for i := 1; i < len(intents); i++ {
		// IDs grow with each enqueue: the order of the IDs is the order of
		// the enqueues.
		if intents[i].ID < intents[i-1].ID {
			failuref(t, "Intents enqueued in another order than expected: expected intent %d (%s) was enqueued before %d (%s); in the order enqueued:\n%s",
				i+1, describe(expected[i]), i, describe(expected[i-1]), list(enqueueOrder(intents))) //nolint:gosec // intents holds one intent per expected one
			return nil
		}
	}
	return intents
}

// enqueueOrder is intents sorted by ID, oldest first.
func enqueueOrder(intents []*outbox.Intent) []*outbox.Intent {
	sorted := slices.Clone(intents)
	slices.SortFunc(sorted, func(a, b *outbox.Intent) int { return cmp.Compare(a.ID, b.ID) })
	return sorted
}

// RequireNotEnqueued requires that no intent committed in schema matches
// expected, failing the test otherwise. A nil expected, or one with no field
// set, requires that the namespace has no intent at all.
func RequireNotEnqueued(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string, expected *ExpectedIntent) {
	tb.Helper()
	requireNotEnqueued(ctx, tb, pool, schema, expected)
}

// RequireNotEnqueuedTx is RequireNotEnqueued as tx sees the intents,
// including those tx enqueued and has not committed.
func RequireNotEnqueuedTx(ctx context.Context, tb testing.TB, tx outbox.Executor, schema string, expected *ExpectedIntent) {
	tb.Helper()
	requireNotEnqueued(ctx, tb, tx, schema, expected)
}

func requireNotEnqueued(ctx context.Context, t testingT, q intentdb.Querier, schema string, expected *ExpectedIntent) {
	t.Helper()
	_, matching, err := find(ctx, q, schema, expected)
	if err != nil {
		failuref(t, "Internal failure: %s", err)
		return
	}
	if len(matching) > 0 {
		failuref(t, "%d intent(s) match %s, expected none:\n%s", len(matching), describe(expected), list(matching))
	}
}

// find returns the intents the expectation's key or effect selects, and
// those of them that match it in full.
func find(ctx context.Context, q intentdb.Querier, schema string, expected *ExpectedIntent) (found, matching []*outbox.Intent, _ error) {
	if expected == nil {
		expected = &ExpectedIntent{}
	}
	var wantArgs any
	if expected.Args != nil {
		var err error
		if wantArgs, err = jsonValue(expected.Args); err != nil {
			return nil, nil, fmt.Errorf("error marshalling expected args: %w", err)
		}
	}

	if schema == "" {
		schema = outbox.SchemaDefault
	}
	queries := intentdb.New(schema)
	if expected.Key != "" {
		row, err := queries.Get(ctx, q, namespace(expected), expected.Key)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, nil, fmt.Errorf("error reading intent: %w", err)
		default:
			found = append(found, intentFromRow(row))
		}
	} else {
		rows, err := queries.List(ctx, q, &intentdb.ListParams{
			Effect: expected.Effect, Limit: listLimit, Namespace: namespace(expected),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("error listing intents: %w", err)
		}
		// Oldest first, the order they were enqueued in.
		for i := len(rows) - 1; i >= 0; i-- {
			found = append(found, intentFromRow(rows[i]))
		}
	}

	for _, intent := range found {
		if expected.Effect != "" && intent.Effect != expected.Effect {
			continue
		}
		if expected.State != "" && intent.State != expected.State {
			continue
		}
		if wantArgs != nil {
			gotArgs, err := jsonValue(intent.Args)
			if err != nil {
				return nil, nil, fmt.Errorf("error reading intent %d's args: %w", intent.ID, err)
			}
			if !reflect.DeepEqual(gotArgs, wantArgs) {
				continue
			}
		}
		matching = append(matching, intent)
	}
	return found, matching, nil
}

// jsonValue is v's JSON value, decoded into maps, slices and float64s, so
// that two values compare equal whatever their Go types or their JSON's key
// order.
func jsonValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func namespace(expected *ExpectedIntent) string {
	if expected == nil || expected.Namespace == "" {
		return outbox.NamespaceDefault
	}
	return expected.Namespace
}

// scope says which intents were looked at, for failure messages.
func scope(expected *ExpectedIntent) string {
	switch {
	case expected == nil:
		return ""
	case expected.Key != "":
		return fmt.Sprintf(" with key %q", expected.Key)
	case expected.Effect != "":
		return fmt.Sprintf(" of effect %q", expected.Effect)
	}
	return ""
}

// describe is the expectation, for failure messages.
func describe(expected *ExpectedIntent) string {
	if expected == nil {
		return "anything"
	}
	var parts []string
	if expected.Key != "" {
		parts = append(parts, fmt.Sprintf("key %q", expected.Key))
	}
	if expected.Effect != "" {
		parts = append(parts, fmt.Sprintf("effect %q", expected.Effect))
	}
	if expected.State != "" {
		parts = append(parts, fmt.Sprintf("state %s", expected.State))
	}
	if expected.Args != nil {
		b, err := json.Marshal(expected.Args)
		if err != nil {
			b = []byte(err.Error())
		}
		parts = append(parts, "args "+string(b))
	}
	if len(parts) == 0 {
		return "anything"
	}
	return strings.Join(parts, ", ")
}

// list is one line per intent, at most listedMax of them, for failure
// messages.
func list(intents []*outbox.Intent) string {
	var b strings.Builder
	for i, intent := range intents {
		if i == listedMax {
			fmt.Fprintf(&b, "\n    ... and %d more", len(intents)-listedMax)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "    key %q, effect %q, state %s, args %s", intent.Key, intent.Effect, intent.State, intent.Args)
	}
	return b.String()
}

// failuref fails the test with a message set apart as outboxtest's, as
// rivertest's failures are.
func failuref(t testingT, format string, args ...any) {
	t.Helper()
	t.Log("\n    outboxtest assertion failure:\n    " + fmt.Sprintf(format, args...) + "\n")
	t.FailNow()
}

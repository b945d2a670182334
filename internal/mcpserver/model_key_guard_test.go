package mcpserver_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// A model re-emits charge_card under a fresh idempotency_key: the seed's
// double charge, which keys from the model alone cannot stop.
func TestModelKeyGuard(t *testing.T) {
	t.Parallel()

	counts := func() (*prometheus.CounterVec, func(tool, outcome string)) {
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_possible_duplicates_total"}, []string{"tool", "outcome"})
		return vec, func(tool, outcome string) { vec.WithLabelValues(tool, outcome).Inc() }
	}

	t.Run("RefusedAndChargedOnce", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		testrun.Dispatcher(t, bundle.pool, &dispatcher.Config{Effects: bundle.registry, Schema: bundle.schema})
		vec, observe := counts()
		cs := bundle.connect(t, &mcpserver.Config{PossibleDuplicateFunc: observe})

		first := call[answer](t, cs, "charge_card", charge("idempotency_key", "model-key-1"))
		te := callError(t, cs, "charge_card", charge("idempotency_key", "model-key-2"), outbox.CodePossibleDuplicate)
		require.Equal(t, "idempotency_key", te.Error.Field)
		require.Contains(t, te.Error.Message, `"model-key-1"`)
		require.Contains(t, te.Error.Message, "new_action true")
		require.Equal(t, 1.0, testutil.ToFloat64(vec.WithLabelValues("charge_card", keyguard.OutcomeRefused)))

		// The earlier key is the retry: a duplicate.
		again := call[answer](t, cs, "charge_card", charge("idempotency_key", "model-key-1"))
		require.True(t, again.Duplicate)
		require.Equal(t, first.ID, again.ID)
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
		waitSucceeded(t, bundle, "model-key-1")
		require.Equal(t, 1, charges(t, bundle), "one charge")
	})

	t.Run("NewActionIsASecondCharge", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		testrun.Dispatcher(t, bundle.pool, &dispatcher.Config{Effects: bundle.registry, Schema: bundle.schema})
		vec, observe := counts()
		cs := bundle.connect(t, &mcpserver.Config{PossibleDuplicateFunc: observe})
		call[answer](t, cs, "charge_card", charge("idempotency_key", "first"))
		second := call[answer](t, cs, "charge_card", charge("idempotency_key", "second", "new_action", true))
		require.False(t, second.Duplicate)
		require.Equal(t, outbox.KeySourceModelConfirmed, second.KeySource, "operators see it was confirmed")
		require.Equal(t, 1.0, testutil.ToFloat64(vec.WithLabelValues("charge_card", keyguard.OutcomeConfirmed)))
		waitSucceeded(t, bundle, "first")
		waitSucceeded(t, bundle, "second")
		require.Equal(t, 2, charges(t, bundle), "two charges, as the model confirmed")
	})

	t.Run("ConcurrentReEmissionsRecordOneIntent", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		var wg sync.WaitGroup
		var mu sync.Mutex
		recorded, refused := 0, 0
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card", Arguments: charge("idempotency_key", fmt.Sprintf("fresh-%d", i))})
				if err != nil {
					t.Errorf("call: %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if res.IsError {
					refused++
				} else {
					recorded++
				}
			}()
		}
		wg.Wait()
		require.Equal(t, 1, recorded)
		require.Equal(t, 19, refused)
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("AfterTheWindowIsANewAction", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		call[answer](t, cs, "charge_card", charge("idempotency_key", "yesterday"))
		// As if recorded a window ago (10 minutes by default).
		_, err := bundle.pool.Exec(t.Context(), `UPDATE `+pgx.Identifier{bundle.schema, "outbox_recent_action"}.Sanitize()+
			` SET created_at = now() - interval '11 minutes'`)
		require.NoError(t, err)
		today := call[answer](t, cs, "charge_card", charge("idempotency_key", "today"))
		require.False(t, today.Duplicate)
		require.Equal(t, outbox.KeySourceExplicit, today.KeySource)
	})

	t.Run("OtherArgumentsAreNotCaught", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		call[answer](t, cs, "charge_card", charge("idempotency_key", "a"))
		// The same charge described in other words is another action to
		// the guard: a documented limit.
		b := call[answer](t, cs, "charge_card", charge("idempotency_key", "b", "description", "the same, reworded"))
		require.False(t, b.Duplicate)
		// Key order and number spelling do not make other arguments.
		callError(t, cs, "charge_card", map[string]any{"idempotency_key": "c", "currency": "eur", "amount": 1999.0, "customer": "cus_1"}, outbox.CodePossibleDuplicate)
	})

	t.Run("AutomaticKeyThenAFreshModelKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		auto := call[answer](t, cs, "charge_card", charge())
		require.Equal(t, outbox.KeySourceAuto, auto.KeySource)
		te := callError(t, cs, "charge_card", charge("idempotency_key", "invented"), outbox.CodePossibleDuplicate)
		require.Contains(t, te.Error.Message, auto.Key)
	})

	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		vec, observe := counts()
		cs := bundle.connect(t, &mcpserver.Config{ModelKeyGuard: keyguard.ModeReplay, PossibleDuplicateFunc: observe})
		first := call[answer](t, cs, "charge_card", charge("idempotency_key", "one"))
		type replayed struct {
			answer
			PossibleDuplicateOf string `json:"possible_duplicate_of"`
		}
		second := call[replayed](t, cs, "charge_card", charge("idempotency_key", "two"))
		require.True(t, second.Duplicate)
		require.Equal(t, first.ID, second.ID)
		require.Equal(t, "one", second.PossibleDuplicateOf)
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
		require.Equal(t, 1.0, testutil.ToFloat64(vec.WithLabelValues("charge_card", keyguard.OutcomeReplayed)))
	})

	t.Run("Off", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, &mcpserver.Config{ModelKeyGuard: keyguard.ModeOff})
		call[answer](t, cs, "charge_card", charge("idempotency_key", "one"))
		second := call[answer](t, cs, "charge_card", charge("idempotency_key", "two"))
		require.False(t, second.Duplicate)
		require.Equal(t, 2, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})
}

func waitSucceeded(t *testing.T, b *testBundle, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		intent, err := b.client.Get(t.Context(), "", key)
		return err == nil && intent.State == outbox.StateSucceeded
	}, 30*time.Second, 20*time.Millisecond)
}

// charges counts every charge the noop stand-in made, whatever the key.
func charges(t *testing.T, b *testBundle) int {
	t.Helper()
	n, err := noop.Count(t.Context(), b.pool, b.schema, "")
	require.NoError(t, err)
	return n
}

// Every tool's structuredContent matches the outputSchema it lists, for the
// answers a model meets: a new intent, a duplicate, a finished intent with
// its result, a page of intents.
func TestOutputSchemasMatch(t *testing.T) {
	t.Parallel()
	bundle := setup(t)
	testrun.Dispatcher(t, bundle.pool, &dispatcher.Config{Effects: bundle.registry, Schema: bundle.schema})
	cs := bundle.connect(t, nil)
	res, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	schemas := map[string]*jsonschema.Resolved{}
	for _, tool := range res.Tools {
		b, err := json.Marshal(tool.OutputSchema)
		require.NoError(t, err)
		var s jsonschema.Schema
		require.NoError(t, json.Unmarshal(b, &s))
		resolved, err := s.Resolve(nil)
		require.NoError(t, err, tool.Name)
		schemas[tool.Name] = resolved
	}
	check := func(tool string, args map[string]any) {
		t.Helper()
		out, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
		require.NoError(t, err)
		require.False(t, out.IsError, text(out))
		var v any
		require.NoError(t, json.Unmarshal(structured(t, out), &v))
		require.NoError(t, schemas[tool].Validate(v), "%s: %s", tool, structured(t, out))
	}
	check("charge_card", charge("idempotency_key", "schema-1"))
	check("charge_card", charge("idempotency_key", "schema-1"))
	// requested_by names MCP and the client from the handshake.
	intent, err := bundle.client.Get(t.Context(), "", "schema-1")
	require.NoError(t, err)
	require.NotNil(t, intent.RequestedBy)
	require.Equal(t, "mcp:test", *intent.RequestedBy)
	check("send_email", map[string]any{"to": []string{"a@example.com"}, "subject": "s", "html": "<p>h</p>"})
	check("get_intent", map[string]any{"key": "schema-1", "wait_seconds": 20})
	check("list_intents", map[string]any{"limit": 1})
	check("list_intents", nil)
}

package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/autokey"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

type testBundle struct {
	client   *outbox.Client
	pool     *pgxpool.Pool
	registry *effects.Registry
	schema   string
}

// setup returns a bundle on a fresh schema whose registry enables the effect
// charge (a noop effect by that name, deduplicated, recording in the
// schema), so that charge_card runs as it does in serve, and noop. The
// other tools' effects (email, ticket, webhook) are not enabled.
func setup(t testing.TB) *testBundle {
	t.Helper()
	dedupe := effects.GuaranteeDeduplicated
	env := testdb.NewEnv(t, map[string]effects.Guarantee{"charge": dedupe, "email": dedupe, "ticket": dedupe, "webhook": dedupe, "noop": dedupe})
	return &testBundle{client: env.Client, pool: env.Pool, registry: env.Registry, schema: env.Schema}
}

// connect starts an MCP server with config over in-memory transports and
// returns the SDK client's session.
func (b *testBundle) connect(t *testing.T, config *mcpserver.Config) *mcp.ClientSession {
	t.Helper()
	server, err := mcpserver.New(b.pool, b.client, config)
	require.NoError(t, err)
	serverTransport, clientTransport := mcp.NewInMemoryTransports()
	ss, err := server.Connect(t.Context(), serverTransport, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), clientTransport, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// answer is a mutating tool's structured answer.
type answer struct {
	outbox.Intent
	Duplicate bool `json:"duplicate"`
}

// toolError is a tool error's structured content.
type toolError struct {
	Error struct {
		Code    string `json:"code"`
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"error"`
}

// call calls a tool and requires it to succeed, returning its structured
// answer decoded into T.
func call[T any](t *testing.T, cs *mcp.ClientSession, tool string, args any) *T {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "tool error: %s", text(res))
	var v T
	require.NoError(t, json.Unmarshal(structured(t, res), &v))
	// The text content carries the same JSON, for clients that read only text.
	require.JSONEq(t, string(structured(t, res)), text(res))
	return &v
}

// callError calls a tool and requires it to fail with a tool error (not a
// protocol error) of code.
func callError(t *testing.T, cs *mcp.ClientSession, tool string, args any, code string) *toolError {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err, "a tool error is a result, not a protocol error")
	require.True(t, res.IsError, "expected an error, got %s", text(res))
	require.Nil(t, res.StructuredContent, "an error has no structuredContent: clients check it against the output schema")
	require.Len(t, res.Content, 2, "the line a model reads, and the error's JSON")
	var te toolError
	require.NoError(t, json.Unmarshal([]byte(res.Content[1].(*mcp.TextContent).Text), &te))
	require.Equal(t, code, te.Error.Code, "message: %s", te.Error.Message)
	require.True(t, strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, code+": "), text(res))
	return &te
}

func structured(t *testing.T, res *mcp.CallToolResult) []byte {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	return b
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func charge(extra ...any) map[string]any {
	args := map[string]any{"customer": "cus_1", "amount": 1999, "currency": "eur"}
	for i := 0; i < len(extra); i += 2 {
		args[extra[i].(string)] = extra[i+1]
	}
	return args
}

// A server lists the tools of the effects it runs, and the read tools: a
// model shown a tool that can only answer unknown_effect wastes its calls.
func TestListToolsOfEnabledEffectsOnly(t *testing.T) {
	t.Parallel()
	env := testdb.NewEnv(t, map[string]effects.Guarantee{"charge": effects.GuaranteeDeduplicated})
	bundle := &testBundle{client: env.Client, pool: env.Pool, registry: env.Registry, schema: env.Schema}
	cs := bundle.connect(t, nil)
	res, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	require.ElementsMatch(t, []string{"charge_card", "get_intent", "list_intents"}, names)
}

func TestListTools(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	cs := bundle.connect(t, nil)
	res, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)

	tools := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	require.Len(t, tools, 6)

	for name, required := range map[string][]string{
		"charge_card":   {"customer", "amount", "currency"},
		"send_email":    {"to", "subject"},
		"create_ticket": {"subject", "body"},
		"call_webhook":  {"endpoint", "payload"},
	} {
		tool := tools[name]
		require.NotNil(t, tool, name)
		require.NotNil(t, tool.Annotations, name)
		require.NotNil(t, tool.Annotations.DestructiveHint, name)
		require.True(t, *tool.Annotations.DestructiveHint, name)
		require.True(t, tool.Annotations.IdempotentHint, name)
		require.False(t, tool.Annotations.ReadOnlyHint, name)
		require.Contains(t, tool.Description, "idempotency_key", name)

		schema := schemaOf(t, tool)
		require.Equal(t, "object", schema["type"], name)
		require.ElementsMatch(t, required, schema["required"], name)
		require.Equal(t, false, schema["additionalProperties"], name)
		props := schema["properties"].(map[string]any)
		key := props["idempotency_key"].(map[string]any)
		require.Equal(t, "string", key["type"], name)
		require.EqualValues(t, 255, key["maxLength"], name)
		require.NotContains(t, schema["required"], "idempotency_key", "the key is optional")
		for prop, p := range props {
			require.NotEmpty(t, p.(map[string]any)["description"], "%s.%s is documented", name, prop)
		}
	}
	chargeProps := schemaOf(t, tools["charge_card"])["properties"].(map[string]any)
	require.Equal(t, "integer", chargeProps["amount"].(map[string]any)["type"])
	require.EqualValues(t, 1, chargeProps["amount"].(map[string]any)["minimum"])
	require.Equal(t, "^[A-Za-z]{3}$", chargeProps["currency"].(map[string]any)["pattern"])
	ticketProps := schemaOf(t, tools["create_ticket"])["properties"].(map[string]any)
	require.Equal(t, []any{"low", "normal", "high", "urgent"}, ticketProps["priority"].(map[string]any)["enum"])
	emailProps := schemaOf(t, tools["send_email"])["properties"].(map[string]any)
	require.EqualValues(t, 50, emailProps["to"].(map[string]any)["maxItems"])

	for _, name := range []string{"get_intent", "list_intents"} {
		tool := tools[name]
		require.NotNil(t, tool, name)
		require.True(t, tool.Annotations.ReadOnlyHint, name)
		require.Equal(t, "object", schemaOf(t, tool)["type"], name)
	}
	require.Equal(t, []any{"key"}, schemaOf(t, tools["get_intent"])["required"])
}

func schemaOf(t *testing.T, tool *mcp.Tool) map[string]any {
	t.Helper()
	b, err := json.Marshal(tool.InputSchema)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func TestChargeCard(t *testing.T) {
	t.Parallel()

	t.Run("ExplicitKeyTwice", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		first := call[answer](t, cs, "charge_card", charge("idempotency_key", "order-1-charge"))
		require.False(t, first.Duplicate)
		require.Equal(t, "order-1-charge", first.Key)
		require.Equal(t, "charge", first.Effect)
		require.Equal(t, outbox.StatePending, first.State)
		require.Equal(t, outbox.KeySourceExplicit, first.KeySource)
		require.JSONEq(t, `{"customer": "cus_1", "amount": 1999, "currency": "eur"}`, string(first.Args),
			"the effect's arguments, without idempotency_key")

		// The retry, with the arguments spelt otherwise: the same action.
		second := call[answer](t, cs, "charge_card", map[string]any{
			"idempotency_key": "order-1-charge", "currency": "eur", "amount": 1999.0, "customer": "cus_1",
		})
		require.True(t, second.Duplicate)
		require.Equal(t, first.ID, second.ID)
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("NoKeyTwice", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		first := call[answer](t, cs, "charge_card", charge())
		require.False(t, first.Duplicate)
		require.Equal(t, outbox.KeySourceAuto, first.KeySource)
		require.True(t, strings.HasPrefix(first.Key, "auto:charge_card:"), first.Key)
		second := call[answer](t, cs, "charge_card", charge())
		require.True(t, second.Duplicate)
		require.Equal(t, first.ID, second.ID)
		require.Equal(t, outbox.KeySourceAuto, second.KeySource)
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))

		// Other arguments are another action, with a key of its own.
		third := call[answer](t, cs, "charge_card", charge("amount", 2000))
		require.False(t, third.Duplicate)
		require.NotEqual(t, first.Key, third.Key)

		// The automatic key, given back explicitly, retries the action.
		again := call[answer](t, cs, "charge_card", charge("idempotency_key", first.Key))
		require.True(t, again.Duplicate)
		require.Equal(t, first.ID, again.ID)
		require.Equal(t, 2, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("ConcurrentNoKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		var wg sync.WaitGroup
		ids := make([]int64, 8)
		for i := range ids {
			wg.Go(func() {
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge_card", Arguments: charge()})
				if err != nil || res.IsError {
					return
				}
				var a answer
				if json.Unmarshal(structured(t, res), &a) == nil {
					ids[i] = a.ID
				}
			})
		}
		wg.Wait()
		for _, id := range ids {
			require.Equal(t, ids[0], id)
			require.NotZero(t, id)
		}
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("SameKeyOtherArgs", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		call[answer](t, cs, "charge_card", charge("idempotency_key", "k1"))
		te := callError(t, cs, "charge_card", charge("idempotency_key", "k1", "amount", 5000), outbox.CodeIdempotencyKeyReused)
		require.Equal(t, "idempotency_key", te.Error.Field)
		require.Contains(t, te.Error.Message, "effect charge")
		// Another tool, same key: another effect, refused too.
		callError(t, cs, "send_email", map[string]any{
			"idempotency_key": "k1", "to": []string{"a@example.com"}, "subject": "s", "text": "t",
		}, outbox.CodeIdempotencyKeyReused)
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("BadCalls", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		for name, tt := range map[string]struct {
			tool  string
			args  any
			code  string
			field string
		}{
			"EmptyKey":          {"charge_card", charge("idempotency_key", ""), outbox.CodeInvalidKey, "idempotency_key"},
			"KeyWithSpace":      {"charge_card", charge("idempotency_key", "a b"), outbox.CodeInvalidKey, "idempotency_key"},
			"LongKey":           {"charge_card", charge("idempotency_key", strings.Repeat("k", 256)), outbox.CodeInvalidKey, "idempotency_key"},
			"KeyNotString":      {"charge_card", charge("idempotency_key", 42), outbox.CodeInvalidKey, "idempotency_key"},
			"MissingAmount":     {"charge_card", map[string]any{"customer": "cus_1", "currency": "eur"}, outbox.CodeInvalidArgs, "arguments"},
			"NegativeAmount":    {"charge_card", charge("amount", -5), outbox.CodeInvalidArgs, "amount"},
			"FractionalAmount":  {"charge_card", charge("amount", 19.99), outbox.CodeInvalidArgs, "amount"},
			"AmountString":      {"charge_card", charge("amount", "1999"), outbox.CodeInvalidArgs, "amount"},
			"BadCurrency":       {"charge_card", charge("currency", "euro"), outbox.CodeInvalidArgs, "currency"},
			"UnknownArgument":   {"charge_card", charge("tip", 5), outbox.CodeInvalidArgs, "arguments"},
			"NoArguments":       {"charge_card", nil, outbox.CodeInvalidArgs, "arguments"},
			"WebhookNoPayload":  {"call_webhook", map[string]any{"endpoint": "crm"}, outbox.CodeInvalidArgs, "arguments"},
			"EmailNoBody":       {"send_email", map[string]any{"to": []string{"a@example.com"}, "subject": "s"}, outbox.CodeInvalidArgs, "text"},
			"EmailNoRecipients": {"send_email", map[string]any{"to": []string{}, "subject": "s", "text": "t"}, outbox.CodeInvalidArgs, "to"},
			"TooDeep":           {"call_webhook", json.RawMessage(`{"endpoint": "crm", "payload": {"a": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`), outbox.CodeInvalidArgs, "arguments"},
			"HugeNumber":        {"call_webhook", json.RawMessage(`{"endpoint": "crm", "payload": {"a": 1e1000000}}`), outbox.CodeInvalidArgs, "arguments"},
			"DuplicateName":     {"charge_card", json.RawMessage(`{"customer": "a", "customer": "b", "amount": 1, "currency": "eur"}`), outbox.CodeInvalidArgs, "customer"},
			"ArgumentsArray":    {"charge_card", json.RawMessage(`[1, 2]`), outbox.CodeInvalidArgs, "arguments"},
			"GetNoKey":          {"get_intent", map[string]any{}, outbox.CodeInvalidArgs, "arguments"},
			"GetLongWait":       {"get_intent", map[string]any{"key": "k", "wait_seconds": 61}, outbox.CodeInvalidArgs, "wait_seconds"},
			"GetUnknownKey":     {"get_intent", map[string]any{"key": "nothing-here"}, outbox.CodeNotFound, ""},
			"ListBadState":      {"list_intents", map[string]any{"states": []string{"done"}}, outbox.CodeInvalidArgs, "states"},
			"ListBadCursor":     {"list_intents", map[string]any{"cursor": "nope"}, outbox.CodeInvalidArgs, "cursor"},
			"ListHugeLimit":     {"list_intents", map[string]any{"limit": 5000}, outbox.CodeInvalidArgs, "limit"},
		} {
			t.Run(name, func(t *testing.T) {
				te := callError(t, cs, tt.tool, tt.args, tt.code)
				require.Equal(t, tt.field, te.Error.Field)
				require.NotEmpty(t, te.Error.Message)
			})
		}
		require.Equal(t, 0, testdb.CountIntents(t, bundle.pool, bundle.schema), "nothing written")
	})

	t.Run("UnknownTool", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		// Not a tool error: there is no such tool (a protocol error).
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "refund_card", Arguments: map[string]any{}})
		require.ErrorIs(t, err, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams})
	})
}

// TestAutoKeyWindow checks the window of the automatic key around its
// boundaries: the window is the first call's, as long as that call is less
// than a window old. Instead of waiting, the test moves the first intent
// back in time: it renames it to the previous window's key and backdates it.
func TestAutoKeyWindow(t *testing.T) {
	t.Parallel()

	const window = time.Hour
	args, err := autokey.Canonicalize([]byte(`{"customer":"cus_1","amount":1999,"currency":"eur"}`))
	require.NoError(t, err)

	// age makes the intent look created age ago, in the window before its
	// own, and returns its new key (an UPDATE, not testfactory.Intent: the
	// intent the tool call enqueued).
	age := func(t *testing.T, b *testBundle, key string, age time.Duration) string {
		t.Helper()
		parts := strings.Split(key, ":")
		start, err := time.Parse("20060102T150405Z", parts[2])
		require.NoError(t, err)
		previous := autokey.Key("charge_card", args, start.Add(-window))
		tag, err := b.pool.Exec(t.Context(), "UPDATE "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+
			" SET key = $1, created_at = now() - $2::interval WHERE key = $3",
			previous, fmt.Sprintf("%d microseconds", age.Microseconds()), key)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
		return previous
	}

	t.Run("AcrossBoundaryWithinWindow", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, &mcpserver.Config{AutoKeyWindow: window})
		first := call[answer](t, cs, "charge_card", charge())
		// As if the first call came 59 minutes ago, in the previous window:
		// a boundary lies between the two calls, but less than a window.
		previous := age(t, bundle, first.Key, window-time.Minute)
		second := call[answer](t, cs, "charge_card", charge())
		require.True(t, second.Duplicate)
		require.Equal(t, previous, second.Key)
		require.Equal(t, first.ID, second.ID)
	})

	t.Run("AfterWindow", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, &mcpserver.Config{AutoKeyWindow: window})
		first := call[answer](t, cs, "charge_card", charge())
		previous := age(t, bundle, first.Key, window+time.Minute)
		second := call[answer](t, cs, "charge_card", charge())
		require.False(t, second.Duplicate, "a window after the first call, a new action starts")
		require.NotEqual(t, previous, second.Key)
		require.Equal(t, first.Key, second.Key, "the current window's key, free again")
		require.Equal(t, 2, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})
}

func TestGetIntent(t *testing.T) {
	t.Parallel()

	t.Run("WaitUntilSucceeded", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		enqueued := call[answer](t, cs, "charge_card", charge("idempotency_key", "wait-1"))
		require.Equal(t, outbox.StatePending, enqueued.State)
		testrun.Dispatcher(t, bundle.pool, &dispatcher.Config{Effects: bundle.registry, Schema: bundle.schema})
		start := time.Now()
		intent := call[outbox.Intent](t, cs, "get_intent", map[string]any{"key": "wait-1", "wait_seconds": 30})
		require.Equal(t, outbox.StateSucceeded, intent.State)
		require.Less(t, time.Since(start), 20*time.Second, "answered when terminal, not at the end of the wait")
		require.JSONEq(t, fmt.Sprintf(`{"provider_key": %q}`, intent.ProviderKey), stripNoopAt(t, intent.Result))
	})

	t.Run("WaitEndsFirst", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		call[answer](t, cs, "charge_card", charge("idempotency_key", "wait-2"))
		// No dispatcher: the intent stays pending, and the wait's end
		// answers it as it stands.
		intent := call[outbox.Intent](t, cs, "get_intent", map[string]any{"key": "wait-2", "wait_seconds": 0.2})
		require.Equal(t, outbox.StatePending, intent.State)
	})

	// A wait that ends first answers the intent as it stands at its end,
	// not as the wait last read it: here the intent is claimed during the
	// wait, which wakes no waiter.
	t.Run("WaitEndsFirstAsItStands", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, &mcpserver.Config{WaitFunc: func(ctx context.Context, namespace, key string) (*outbox.Intent, error) {
			intent, err := bundle.client.Get(ctx, namespace, key)
			if err != nil {
				return nil, err
			}
			_, err = bundle.pool.Exec(ctx, `UPDATE `+pgx.Identifier{bundle.schema, "outbox_intent"}.Sanitize()+
				` SET state = 'running', attempt = 1, lease_expires_at = now() + interval '1 minute' WHERE key = $1`, key)
			if err != nil {
				return nil, err
			}
			<-ctx.Done()
			return intent, ctx.Err()
		}})
		call[answer](t, cs, "charge_card", charge("idempotency_key", "wait-3"))
		intent := call[outbox.Intent](t, cs, "get_intent", map[string]any{"key": "wait-3", "wait_seconds": 0.2})
		require.Equal(t, outbox.StateRunning, intent.State)
		require.Equal(t, 1, intent.Attempts)
	})

	t.Run("NoWait", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		cs := bundle.connect(t, nil)
		call[answer](t, cs, "charge_card", charge("idempotency_key", "k"))
		intent := call[outbox.Intent](t, cs, "get_intent", map[string]any{"key": "k"})
		require.Equal(t, "k", intent.Key)
		require.Equal(t, outbox.StatePending, intent.State)
	})
}

func stripNoopAt(t *testing.T, result json.RawMessage) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(result, &m))
	delete(m, "noop_at")
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

func TestListIntents(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	cs := bundle.connect(t, nil)
	for i := range 5 {
		call[answer](t, cs, "charge_card", charge("idempotency_key", fmt.Sprintf("list-%d", i), "amount", 100+i))
	}
	type page struct {
		Intents    []outbox.Intent `json:"intents"`
		NextCursor *string         `json:"next_cursor"`
	}
	var keys []string
	args := map[string]any{"limit": 2}
	for range 5 {
		p := call[page](t, cs, "list_intents", args)
		for _, i := range p.Intents {
			keys = append(keys, i.Key)
		}
		if p.NextCursor == nil {
			break
		}
		args = map[string]any{"limit": 2, "cursor": *p.NextCursor}
	}
	require.Equal(t, []string{"list-4", "list-3", "list-2", "list-1", "list-0"}, keys)

	p := call[page](t, cs, "list_intents", map[string]any{"states": []string{"succeeded"}})
	require.Empty(t, p.Intents)
	p = call[page](t, cs, "list_intents", map[string]any{"states": []string{"pending"}, "effect": "charge"})
	require.Len(t, p.Intents, 5)
	require.Nil(t, p.NextCursor)
	p = call[page](t, cs, "list_intents", nil)
	require.Len(t, p.Intents, 5)
}

func TestNamespaces(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	alpha := bundle.connect(t, &mcpserver.Config{Namespace: "alpha"})
	beta := bundle.connect(t, &mcpserver.Config{Namespace: "beta"})
	a := call[answer](t, alpha, "charge_card", charge("idempotency_key", "shared"))
	b := call[answer](t, beta, "charge_card", charge("idempotency_key", "shared", "amount", 1))
	require.False(t, b.Duplicate, "the same key in another namespace is another intent")
	require.NotEqual(t, a.ID, b.ID)
	require.Equal(t, "alpha", a.Namespace)
	require.Equal(t, "beta", b.Namespace)

	alphaOnly := call[answer](t, alpha, "charge_card", charge("idempotency_key", "alpha-only", "amount", 2))
	callError(t, beta, "get_intent", map[string]any{"key": alphaOnly.Key}, outbox.CodeNotFound)
	type page struct {
		Intents []outbox.Intent `json:"intents"`
	}
	require.Len(t, call[page](t, beta, "list_intents", nil).Intents, 1)

	// Automatic keys are per namespace too.
	autoA := call[answer](t, alpha, "charge_card", charge())
	autoB := call[answer](t, beta, "charge_card", charge())
	require.False(t, autoB.Duplicate)
	require.NotEqual(t, autoA.ID, autoB.ID)
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	// Each refusal names its cause: a case refused for another reason than
	// the one it sets up would otherwise pass unnoticed.
	for name, tc := range map[string]struct {
		config *mcpserver.Config
		want   string
	}{
		"BadNamespace":   {&mcpserver.Config{Namespace: "a b"}, "namespace: must be printable ASCII"},
		"NegativeWindow": {&mcpserver.Config{AutoKeyWindow: -time.Second}, "AutoKeyWindow must be positive"},
		"DuplicateTool":  {&mcpserver.Config{Tools: append(mcpserver.EffectTools(), mcpserver.EffectTools()[0])}, fmt.Sprintf("tool %q defined twice", mcpserver.EffectTools()[0].Name)},
		"ReadToolName":   {&mcpserver.Config{Tools: []*mcpserver.EffectTool{{Name: "get_intent", Effect: "noop", Description: "x", InputSchema: mcpserver.EffectTools()[0].InputSchema}}}, `tool "get_intent" defined twice`},
		"NoSchema":       {&mcpserver.Config{Tools: []*mcpserver.EffectTool{{Name: "noop_tool", Effect: "noop", Description: "x"}}}, `tool "noop_tool": input schema must be of type object`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := mcpserver.New(bundle.pool, bundle.client, tc.config)
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("BadNamespaceCode", func(t *testing.T) {
		t.Parallel()
		_, err := mcpserver.New(bundle.pool, bundle.client, &mcpserver.Config{Namespace: "a b"})
		require.Equal(t, outbox.CodeInvalidKey, outbox.ErrorCode(err))
	})
}

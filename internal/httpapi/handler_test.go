package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/dispatcher"
	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// The bundle's tokens: two namespaces.
const (
	tokenAlpha = "tok-alpha-0123456789"
	tokenBeta  = "tok-beta-9876543210"
)

type testBundle struct {
	client   *outbox.Client
	handler  *httpapi.Handler
	pool     *pgxpool.Pool
	registry *effects.Registry
	schema   string
	url      string
}

// setup serves the API on a fresh schema over a real HTTP server, with the
// tokens of namespaces alpha and beta (nil config) or config. The effects
// are noop, noop_at_most_once, and noops named charge, email, ticket and
// webhook, for /mcp's tools.
func setup(t *testing.T, config *apiConfig) *testBundle {
	t.Helper()
	return setupTraced(t, config, nil)
}

// setupTraced is setup with tracer on the pool that the handler and its
// client use (the shared pool when tracer is nil).
func setupTraced(t *testing.T, config *apiConfig, tracer pgx.QueryTracer) *testBundle {
	t.Helper()
	env := testdb.NewEnv(t, map[string]effects.Guarantee{
		"noop": effects.GuaranteeDeduplicated, "noop_at_most_once": effects.GuaranteeAtMostOnce, "charge": effects.GuaranteeDeduplicated,
		// noops by the names of the other MCP tools' effects, so that
		// /mcp lists every tool.
		"email": effects.GuaranteeAtMostOnce, "ticket": effects.GuaranteeAtMostOnce, "webhook": effects.GuaranteeAtMostOnce,
	})
	b := &testBundle{client: env.Client, pool: env.Pool, registry: env.Registry, schema: env.Schema}
	var err error
	if tracer != nil {
		poolConfig, err := pgxpool.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		poolConfig.ConnConfig.Tracer = tracer
		b.pool, err = pgxpool.NewWithConfig(context.Background(), poolConfig)
		require.NoError(t, err)
		// Registered after the schema's drop, so it runs before it.
		t.Cleanup(b.pool.Close)
		b.client, err = outbox.NewClient(b.pool, &outbox.Config{Effects: b.registry, Schema: b.schema})
		require.NoError(t, err)
	}
	if config == nil {
		config = &apiConfig{Tokens: []access.Token{access.NewToken(tokenAlpha, "alpha", access.RoleOperator), access.NewToken(tokenBeta, "beta", access.RoleOperator)}}
	}
	b.handler, err = newHandler(b.pool, b.client, config)
	require.NoError(t, err)
	server := httptest.NewServer(b.handler)
	t.Cleanup(server.Close)
	b.url = server.URL
	return b
}

// keyTracer signals ended each time a query with key among its arguments
// has ended, once armed: a test learns that a request has read an intent.
type keyTracer struct {
	armed atomic.Bool
	ended chan struct{}
	key   string
}

type keyTracerMatch struct{}

func (k *keyTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	for _, arg := range data.Args {
		if s, ok := arg.(string); ok && s == k.key && k.armed.Load() {
			return context.WithValue(ctx, keyTracerMatch{}, true)
		}
	}
	return ctx
}

func (k *keyTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if match, _ := ctx.Value(keyTracerMatch{}).(bool); match {
		select {
		case k.ended <- struct{}{}:
		default:
		}
	}
}

// response is one answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the answer's error code, requiring an error body.
func (r *response) errorCode(t *testing.T) string {
	t.Helper()
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body), "body: %s", r.body)
	require.NotEmpty(t, body.Error.Code, "body: %s", r.body)
	require.NotEmpty(t, body.Error.Message, "body: %s", r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	return body.Error.Code
}

func (r *response) field(t *testing.T) string {
	t.Helper()
	var body struct {
		Error struct {
			Field string `json:"field"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body))
	return body.Error.Field
}

// request is one request to the API.
type request struct {
	method, path, token string
	header              map[string]string
	body                string
}

func (b *testBundle) do(t *testing.T, req request) *response {
	t.Helper()
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	r, err := http.NewRequestWithContext(t.Context(), req.method, b.url+req.path, body)
	require.NoError(t, err)
	if req.token != "" {
		r.Header.Set("Authorization", "Bearer "+req.token)
	}
	for k, v := range req.header {
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &response{status: resp.StatusCode, header: resp.Header, body: respBody}
}

// enqueue posts an intent for namespace alpha.
func (b *testBundle) enqueue(t *testing.T, key, body string) *response {
	t.Helper()
	return b.do(t, request{method: http.MethodPost, path: "/v1/intents", token: tokenAlpha,
		header: map[string]string{"Idempotency-Key": key, "Content-Type": "application/json"}, body: body})
}

// enqueued is an enqueue's answer.
type enqueued struct {
	outbox.Intent
	Duplicate bool `json:"duplicate"`
}

func decode[T any](t *testing.T, r *response) *T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(r.body, &v), "body: %s", r.body)
	return &v
}

func TestEnqueue(t *testing.T) {
	t.Parallel()

	// The IETF Idempotency-Key draft makes the header a structured-field
	// string: "key". Its value is the key; a bare token is the same key.
	t.Run("QuotedKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		body := `{"effect": "noop", "args": {}}`
		resp := bundle.enqueue(t, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, body)
		require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
		require.Equal(t, "8e03978e-40d5-43e8-bc93-6894a57f9324", decode[enqueued](t, resp).Key)
		require.Equal(t, "/v1/intents/8e03978e-40d5-43e8-bc93-6894a57f9324", resp.header.Get("Location"))
		bare := bundle.enqueue(t, "8e03978e-40d5-43e8-bc93-6894a57f9324", body)
		require.Equal(t, http.StatusOK, bare.status, "the same key, bare")
		require.True(t, decode[enqueued](t, bare).Duplicate)

		escaped := bundle.enqueue(t, `"a\"b\\c"`, body)
		require.Equal(t, http.StatusCreated, escaped.status, "%s", escaped.body)
		require.Equal(t, `a"b\c`, decode[enqueued](t, escaped).Key)

		for _, bad := range []string{`"unterminated`, `"a"b"`, `"a\x"`, `"a b"`, `""`, `"\"`} {
			resp := bundle.enqueue(t, bad, body)
			require.Equal(t, http.StatusBadRequest, resp.status, bad)
			require.Contains(t, string(resp.body), `"field":"Idempotency-Key"`, bad)
			require.Contains(t, string(resp.body), `"code":"invalid_key"`, bad)
		}
		require.Equal(t, 2, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	// A body declared as anything but JSON is refused before it is read:
	// a browser's form or text/plain fetch cannot pass for an API call.
	t.Run("ContentType", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		body := `{"effect": "noop", "args": {}}`
		post := func(path, contentType string) *response {
			header := map[string]string{"Idempotency-Key": "ct"}
			if contentType != "" {
				header["Content-Type"] = contentType
			}
			return bundle.do(t, request{method: http.MethodPost, path: path, token: tokenAlpha, header: header, body: body})
		}
		for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain;charset=UTF-8", "multipart/form-data; boundary=x", "application/jsonx", "bogus"} {
			for _, path := range []string{"/v1/intents", "/v1/intents/ct/cancel", "/v1/intents/ct/resolve"} {
				resp := post(path, ct)
				require.Equal(t, http.StatusUnsupportedMediaType, resp.status, "%s %s", path, ct)
				require.Equal(t, httpapi.CodeUnsupportedMediaType, resp.errorCode(t))
				require.Equal(t, "Content-Type", resp.field(t))
				require.Equal(t, "nosniff", resp.header.Get("X-Content-Type-Options"))
			}
		}
		require.Equal(t, 0, testdb.CountIntents(t, bundle.pool, bundle.schema))
		for i, ct := range []string{"application/json; charset=utf-8", "application/merge-patch+json", ""} {
			resp := post("/v1/intents", ct)
			require.Contains(t, []int{http.StatusCreated, http.StatusOK}, resp.status, "%d %s: %s", i, ct, resp.body)
			require.Equal(t, "nosniff", resp.header.Get("X-Content-Type-Options"))
		}
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("NewThenDuplicate", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		resp := bundle.enqueue(t, "order-1", `{"effect": "noop", "args": {"amount": 1, "to": "x"}, "requested_by": "agent-7"}`)
		require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
		require.Empty(t, resp.header.Get("Idempotent-Replayed"))
		require.Equal(t, "/v1/intents/order-1", resp.header.Get("Location"))
		first := decode[enqueued](t, resp)
		require.False(t, first.Duplicate)
		require.Equal(t, "order-1", first.Key)
		require.Equal(t, "alpha", first.Namespace)
		require.Equal(t, "noop", first.Effect)
		require.Equal(t, outbox.StatePending, first.State)
		require.Equal(t, outbox.KeySourceExplicit, first.KeySource)
		require.Equal(t, "agent-7", *first.RequestedBy)
		require.Equal(t, outbox.ProviderKey("alpha", "order-1", first.ID), first.ProviderKey)

		// Every field of the intent JSON, and duplicate.
		var fields map[string]any
		require.NoError(t, json.Unmarshal(resp.body, &fields))
		for _, name := range []string{"key", "namespace", "effect", "args", "state", "attempts", "result", "error",
			"provider_key", "requested_by", "key_source", "created_at", "updated_at", "completed_at", "duplicate"} {
			require.Contains(t, fields, name)
		}

		// The retry, spelt otherwise: the same action as JSON values.
		resp = bundle.enqueue(t, "order-1", `{"args": {"to": "x", "amount": 1.0}, "effect": "noop"}`)
		require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
		require.Equal(t, "true", resp.header.Get("Idempotent-Replayed"))
		second := decode[enqueued](t, resp)
		require.True(t, second.Duplicate)
		require.Equal(t, first.ID, second.ID)
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("KeyReused", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		require.Equal(t, http.StatusCreated, bundle.enqueue(t, "k", `{"effect": "noop", "args": {"amount": 1}}`).status)
		for _, body := range []string{
			`{"effect": "noop", "args": {"amount": 2}}`,
			`{"effect": "noop_at_most_once", "args": {"amount": 1}}`,
		} {
			resp := bundle.enqueue(t, "k", body)
			require.Equal(t, http.StatusUnprocessableEntity, resp.status)
			require.Equal(t, outbox.CodeIdempotencyKeyReused, resp.errorCode(t))
		}
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		for name, tt := range map[string]struct {
			header map[string]string
			body   string
			status int
			code   string
			field  string
		}{
			"NoKey":            {map[string]string{}, `{"effect": "noop", "args": {}}`, 400, outbox.CodeIdempotencyKeyMissing, ""},
			"EmptyKey":         {map[string]string{"Idempotency-Key": ""}, `{"effect": "noop", "args": {}}`, 400, outbox.CodeIdempotencyKeyMissing, ""},
			"KeyWithSpace":     {map[string]string{"Idempotency-Key": "a b"}, `{"effect": "noop", "args": {}}`, 400, outbox.CodeInvalidKey, "Idempotency-Key"},
			"KeyTooLong":       {map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, `{"effect": "noop", "args": {}}`, 400, outbox.CodeInvalidKey, "Idempotency-Key"},
			"KeyNotASCII":      {map[string]string{"Idempotency-Key": "clé"}, `{"effect": "noop", "args": {}}`, 400, outbox.CodeInvalidKey, "Idempotency-Key"},
			"UnknownEffect":    {nil, `{"effect": "refund", "args": {}}`, 400, outbox.CodeUnknownEffect, "effect"},
			"InvalidArgs":      {nil, `{"effect": "noop", "args": {"_noop": {"fail": "sometimes"}}}`, 400, outbox.CodeInvalidArgs, "args._noop.fail"},
			"ArgsNotObject":    {nil, `{"effect": "noop", "args": [1, 2]}`, 400, outbox.CodeInvalidArgs, "args"},
			"ArgsNull":         {nil, `{"effect": "noop", "args": null}`, 400, outbox.CodeInvalidArgs, "args"},
			"ArgsNUL":          {nil, `{"effect": "noop", "args": {"a": "\u0000"}}`, 400, outbox.CodeInvalidArgs, "args"},
			"NumberTooLarge":   {nil, `{"effect": "noop", "args": {"a": 1e1000000}}`, 400, outbox.CodeInvalidArgs, "args"},
			"LongRequestedBy":  {nil, `{"effect": "noop", "args": {}, "requested_by": "` + strings.Repeat("r", 256) + `"}`, 400, outbox.CodeInvalidArgs, "requested_by"},
			"QueryParameter":   {nil, `{"effect": "noop", "args": {}}`, 400, outbox.CodeInvalidArgs, "query"},
			"UnknownField":     {nil, `{"effect": "noop", "args": {}, "priority": 1}`, 400, apierror.CodeInvalidJSON, ""},
			"EffectNotString":  {nil, `{"effect": 7, "args": {}}`, 400, apierror.CodeInvalidJSON, ""},
			"MissingEffect":    {nil, `{"args": {}}`, 400, apierror.CodeInvalidJSON, ""},
			"MissingArgs":      {nil, `{"effect": "noop"}`, 400, apierror.CodeInvalidJSON, ""},
			"NotAnObject":      {nil, `["noop"]`, 400, apierror.CodeInvalidJSON, ""},
			"Empty":            {nil, ``, 400, apierror.CodeInvalidJSON, ""},
			"Trailing":         {nil, `{"effect": "noop", "args": {}} {}`, 400, apierror.CodeInvalidJSON, ""},
			"TrailingGarbage":  {nil, `{"effect": "noop", "args": {}}x`, 400, apierror.CodeInvalidJSON, ""},
			"Duplicate":        {nil, `{"effect": "noop", "effect": "noop_at_most_once", "args": {}}`, 400, apierror.CodeInvalidJSON, ""},
			"NestedDuplicate":  {nil, `{"effect": "noop", "args": {"a": 1, "a": 2}}`, 400, apierror.CodeInvalidJSON, ""},
			"InvalidUTF8":      {nil, "{\"effect\": \"noop\", \"args\": {\"a\": \"\xff\xfe\"}}", 400, apierror.CodeInvalidJSON, ""},
			"DeeplyNested":     {nil, `{"effect": "noop", "args": {"a": ` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}`, 400, apierror.CodeInvalidJSON, ""},
			"VeryDeeplyNested": {nil, `{"effect": "noop", "args": {"a": ` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}`, 400, apierror.CodeInvalidJSON, ""},
			"Truncated":        {nil, `{"effect": "noop", "args": {`, 400, apierror.CodeInvalidJSON, ""},
			"SingleQuotes":     {nil, `{'effect': 'noop', 'args': {}}`, 400, apierror.CodeInvalidJSON, ""},
			"Oversized":        {nil, `{"effect": "noop", "args": {"pad": "` + strings.Repeat("x", httpapi.BodyMax) + `"}}`, 413, apierror.CodeBodyTooLarge, ""},
		} {
			t.Run(name, func(t *testing.T) {
				header := tt.header
				if header == nil {
					header = map[string]string{"Idempotency-Key": "refused-" + name}
				}
				path := "/v1/intents"
				if name == "QueryParameter" {
					path += "?dry_run=true"
				}
				resp := bundle.do(t, request{method: http.MethodPost, path: path, token: tokenAlpha, header: header, body: tt.body})
				require.Equal(t, tt.status, resp.status, "%s", resp.body)
				require.Equal(t, tt.code, resp.errorCode(t), "%s", resp.body)
				require.Equal(t, tt.field, resp.field(t), "%s", resp.body)
			})
		}
		require.Equal(t, 0, testdb.CountIntents(t, bundle.pool, bundle.schema), "nothing written")
	})

	t.Run("JustUnderLimit", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		body := `{"effect": "noop", "args": {"pad": "%s"}}`
		body = fmt.Sprintf(body, strings.Repeat("x", httpapi.BodyMax-len(body)+2))
		require.Len(t, body, httpapi.BodyMax)
		resp := bundle.enqueue(t, "big", body)
		require.Equal(t, http.StatusCreated, resp.status, "%.200s", resp.body)
	})
}

func TestGet(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	// Keys may hold any printable ASCII: the path escapes them.
	for _, key := range []string{"plain", "a/b", "q?x=1&y#z", "100%", "..", ".", "sp%20ace", "https://example.com/order/1"} {
		resp := bundle.enqueue(t, key, `{"effect": "noop", "args": {}}`)
		require.Equal(t, http.StatusCreated, resp.status, "%s: %s", key, resp.body)
		location := resp.header.Get("Location")
		resp = bundle.do(t, request{method: http.MethodGet, path: location, token: tokenAlpha})
		require.Equal(t, http.StatusOK, resp.status, "%s at %s: %s", key, location, resp.body)
		require.Equal(t, key, decode[outbox.Intent](t, resp).Key)
	}

	resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/nothing", token: tokenAlpha})
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, outbox.CodeNotFound, resp.errorCode(t))

	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/" + url.PathEscape("not a key"), token: tokenAlpha})
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, outbox.CodeInvalidKey, resp.errorCode(t))

	for _, wait := range []string{"forever", "61s", "-1s", "30"} {
		resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/plain?wait=" + wait, token: tokenAlpha})
		require.Equal(t, http.StatusBadRequest, resp.status, wait)
		require.Equal(t, outbox.CodeInvalidArgs, resp.errorCode(t), wait)
		require.Equal(t, "wait", resp.field(t), wait)
	}
	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/plain?wait=1s&wait=2s", token: tokenAlpha})
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, outbox.CodeInvalidArgs, resp.errorCode(t))
	require.Equal(t, "wait", resp.field(t))
	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/plain?verbose=1", token: tokenAlpha})
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, outbox.CodeInvalidArgs, resp.errorCode(t))
}

func TestWait(t *testing.T) {
	t.Parallel()

	t.Run("ReturnsWhenTerminal", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		require.Equal(t, http.StatusCreated, bundle.enqueue(t, "w", `{"effect": "noop", "args": {}}`).status)
		done := make(chan *response, 1)
		start := time.Now()
		go func() {
			done <- bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/w?wait=30s", token: tokenAlpha})
		}()
		// Cancel once the wait surely listens, so that the cancel's
		// notification, not a first read, is what wakes it.
		listen := "LISTEN " + pgx.Identifier{bundle.schema + ".intent_changed"}.Sanitize()
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, bundle.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, listen).Scan(&n))
			return n == 1
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, http.StatusOK, bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/w/cancel", token: tokenAlpha}).status)
		select {
		case resp := <-done:
			require.Equal(t, http.StatusOK, resp.status)
			require.Equal(t, outbox.StateCancelled, decode[outbox.Intent](t, resp).State)
			require.Less(t, time.Since(start), 20*time.Second)
		case <-time.After(20 * time.Second):
			t.Fatal("the wait did not return when the intent turned terminal")
		}
	})

	t.Run("UntilSucceeded", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		testrun.Dispatcher(t, bundle.pool, &dispatcher.Config{Effects: bundle.registry, Schema: bundle.schema})
		require.Equal(t, http.StatusCreated, bundle.enqueue(t, "s", `{"effect": "noop", "args": {"_noop": {"sleep": "200ms"}}}`).status)
		resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/s?wait=30s", token: tokenAlpha})
		require.Equal(t, http.StatusOK, resp.status)
		intent := decode[outbox.Intent](t, resp)
		require.Equal(t, outbox.StateSucceeded, intent.State)
		require.NotNil(t, intent.CompletedAt)
	})

	t.Run("EndsFirst", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		require.Equal(t, http.StatusCreated, bundle.enqueue(t, "p", `{"effect": "noop", "args": {}}`).status)
		start := time.Now()
		resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/p?wait=300ms", token: tokenAlpha})
		require.Equal(t, http.StatusOK, resp.status)
		require.Equal(t, outbox.StatePending, decode[outbox.Intent](t, resp).State)
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	})

	// A wait that ends first answers the intent as it stands at its end,
	// not as read before: here it changed without waking the wait.
	t.Run("EndsFirstAsItStands", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		require.Equal(t, http.StatusCreated, bundle.enqueue(t, "r", `{"effect": "noop", "args": {}}`).status)
		done := make(chan *response, 1)
		go func() {
			done <- bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/r?wait=2s", token: tokenAlpha})
		}()
		listen := "LISTEN " + pgx.Identifier{bundle.schema + ".intent_changed"}.Sanitize()
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, bundle.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, listen).Scan(&n))
			return n == 1
		}, 10*time.Second, 10*time.Millisecond)
		// A claim, without its notification, once the wait surely read the
		// intent after listening (the read right after LISTEN would see it).
		time.Sleep(500 * time.Millisecond)
		_, err := bundle.pool.Exec(context.Background(), `UPDATE `+pgx.Identifier{bundle.schema, "outbox_intent"}.Sanitize()+
			` SET state = 'running', attempt = 1, lease_expires_at = now() + interval '1 minute' WHERE key = 'r'`)
		require.NoError(t, err)
		resp := <-done
		require.Equal(t, http.StatusOK, resp.status)
		intent := decode[outbox.Intent](t, resp)
		require.Equal(t, outbox.StateRunning, intent.State)
		require.Equal(t, 1, intent.Attempts)
	})

	// 200 waits in one namespace do not delay another namespace's wait on
	// a finished intent: a wait reads first, and each namespace has its own
	// share of the cap.
	t.Run("OneTenantsWaitsDoNotDelayAnother", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &apiConfig{MaxWaits: 8, Tokens: []access.Token{access.NewToken(tokenAlpha, "alpha", access.RoleOperator), access.NewToken(tokenBeta, "beta", access.RoleOperator)}})
		require.Equal(t, http.StatusCreated, bundle.enqueue(t, "pending", `{"effect": "noop", "args": {}}`).status)
		require.Equal(t, http.StatusCreated, bundle.do(t, request{method: http.MethodPost, path: "/v1/intents", token: tokenBeta,
			header: map[string]string{"Idempotency-Key": "done"}, body: `{"effect": "noop", "args": {}}`}).status)
		require.Equal(t, http.StatusOK, bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/done/cancel", token: tokenBeta}).status)

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var started sync.WaitGroup
		for range 200 {
			started.Add(1)
			go func() {
				started.Done()
				r, err := http.NewRequestWithContext(ctx, http.MethodGet, bundle.url+"/v1/intents/pending?wait=30s", nil)
				if err != nil {
					return
				}
				r.Header.Set("Authorization", "Bearer "+tokenAlpha)
				if resp, err := http.DefaultClient.Do(r); err == nil {
					resp.Body.Close()
				}
			}()
		}
		started.Wait()
		start := time.Now()
		resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/done?wait=30s", token: tokenBeta})
		require.Equal(t, http.StatusOK, resp.status)
		require.Equal(t, outbox.StateCancelled, decode[outbox.Intent](t, resp).State)
		// Queued behind alpha's waits, it would take its whole 30 s.
		require.Less(t, time.Since(start), 10*time.Second)
	})

	// A wait beyond its namespace's share queues: it does not listen, so a
	// change while it queues reaches it only when its time is up, as the
	// intent then stands. The waits with a slot wake at once.
	t.Run("MoreWaitsThanSlots", func(t *testing.T) {
		t.Parallel()
		reads := &keyTracer{ended: make(chan struct{}, 1), key: "q"}
		bundle := setupTraced(t, &apiConfig{MaxWaits: 1}, reads)
		for _, key := range []string{"held", "q"} {
			require.Equal(t, http.StatusCreated, bundle.do(t, request{method: http.MethodPost, path: "/v1/intents",
				header: map[string]string{"Idempotency-Key": key}, body: `{"effect": "noop", "args": {}}`}).status)
		}
		type timed struct {
			resp *response
			took time.Duration
		}
		wait := func(key, d string) <-chan timed {
			out := make(chan timed, 1)
			go func() {
				start := time.Now()
				resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/" + key + "?wait=" + d})
				out <- timed{resp, time.Since(start)}
			}()
			return out
		}
		// The one slot, held by a wait on another intent.
		holder := wait("held", "30s")
		listen := "LISTEN " + pgx.Identifier{bundle.schema + ".intent_changed"}.Sanitize()
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, bundle.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, listen).Scan(&n))
			return n == 1
		}, 10*time.Second, 10*time.Millisecond, "the first wait holds the slot and listens")
		reads.armed.Store(true)
		queued := wait("q", "3s")
		// Its read is the first query on "q" since: once it has ended, the
		// wait queues for the slot (or is about to), not listening.
		select {
		case <-reads.ended:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the second wait did not read the intent")
		}
		require.Equal(t, http.StatusOK, bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/q/cancel"}).status)

		q := <-queued
		require.Equal(t, http.StatusOK, q.resp.status)
		require.Equal(t, outbox.StateCancelled, decode[outbox.Intent](t, q.resp).State, "read again when its time is up")
		require.GreaterOrEqual(t, q.took, 2*time.Second, "the queued wait had no slot, so it did not wake on the change")

		require.Equal(t, http.StatusOK, bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/held/cancel"}).status)
		h := <-holder
		require.Equal(t, outbox.StateCancelled, decode[outbox.Intent](t, h.resp).State)
		require.Less(t, h.took, 10*time.Second, "the wait with the slot wakes on the change")
	})
}

func TestList(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	for i := range 5 {
		effect := "noop"
		if i%2 == 1 {
			effect = "noop_at_most_once"
		}
		require.Equal(t, http.StatusCreated, bundle.enqueue(t, fmt.Sprintf("l-%d", i), `{"effect": "`+effect+`", "args": {}}`).status)
	}
	require.Equal(t, http.StatusOK, bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/l-0/cancel", token: tokenAlpha}).status)

	type page struct {
		Intents    []outbox.Intent `json:"intents"`
		NextCursor *string         `json:"next_cursor"`
	}
	var keys []string
	path := "/v1/intents?limit=2"
	pages := 0
	for path != "" {
		resp := bundle.do(t, request{method: http.MethodGet, path: path, token: tokenAlpha})
		require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
		require.Contains(t, string(resp.body), `"next_cursor":`)
		p := decode[page](t, resp)
		pages++
		for _, i := range p.Intents {
			keys = append(keys, i.Key)
		}
		path = ""
		if p.NextCursor != nil {
			path = "/v1/intents?limit=2&cursor=" + url.QueryEscape(*p.NextCursor)
		}
	}
	require.Equal(t, 3, pages)
	require.Equal(t, []string{"l-4", "l-3", "l-2", "l-1", "l-0"}, keys)

	list := func(query string) []string {
		resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents?" + query, token: tokenAlpha})
		require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
		var keys []string
		for _, i := range decode[page](t, resp).Intents {
			keys = append(keys, i.Key)
		}
		return keys
	}
	require.Equal(t, []string{"l-4", "l-2"}, list("effect=noop&state=pending"))
	require.Equal(t, []string{"l-0"}, list("state=cancelled"))
	require.Equal(t, []string{"l-4", "l-3", "l-2", "l-1", "l-0"}, list("state=pending,cancelled"))
	require.Equal(t, []string{"l-4", "l-3", "l-2", "l-1", "l-0"}, list("state=pending&state=cancelled"))
	require.Empty(t, list("state=succeeded"))

	for query, field := range map[string]string{
		"limit=0":           "limit",
		"limit=1001":        "limit",
		"limit=ten":         "limit",
		"state=done":        "state",
		"cursor=garbage":    "cursor",
		"effect=a&effect=b": "effect",
		"status=pending":    "query",
		"limit=%zz":         "query",
	} {
		resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents?" + query, token: tokenAlpha})
		require.Equal(t, http.StatusBadRequest, resp.status, query)
		require.Equal(t, outbox.CodeInvalidArgs, resp.errorCode(t), query)
		require.Equal(t, field, resp.field(t), query)
	}
}

// An enqueue records who enqueued from the token (enqueued_by), and who
// asked as the body says (requested_by).
func TestEnqueuedBy(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	resp := bundle.enqueue(t, "who", `{"effect": "noop", "args": {}, "requested_by": "agent-7"}`)
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	intent := decode[outbox.Intent](t, resp)
	want := access.NewToken(tokenAlpha, "alpha", access.RoleOperator).Actor()
	require.NotNil(t, intent.EnqueuedBy, "%s", resp.body)
	require.Equal(t, want, *intent.EnqueuedBy)
	require.Equal(t, "agent-7", *intent.RequestedBy)
	require.Contains(t, string(resp.body), `"enqueued_by":"`+want+`"`)

	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/who", token: tokenAlpha})
	require.Equal(t, http.StatusOK, resp.status)
	require.Equal(t, want, *decode[outbox.Intent](t, resp).EnqueuedBy)
}

func TestCancel(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	require.Equal(t, http.StatusCreated, bundle.enqueue(t, "c", `{"effect": "noop", "args": {}}`).status)
	cancel := func(body string) *response {
		return bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/c/cancel", token: tokenAlpha, body: body})
	}
	resp := cancel(`{"reason": "x"}`)
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, apierror.CodeInvalidJSON, resp.errorCode(t))

	resp = cancel(`{"note": 1}`)
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, apierror.CodeInvalidJSON, resp.errorCode(t))
	resp = cancel(`{"note": "` + strings.Repeat("n", 1001) + `"}`)
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, outbox.CodeInvalidArgs, resp.errorCode(t))
	require.Equal(t, "note", resp.field(t))

	resp = cancel(`{"note": "the customer changed their mind"}`)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	intent := decode[outbox.Intent](t, resp)
	require.Equal(t, outbox.StateCancelled, intent.State)
	require.NotNil(t, intent.CompletedAt)
	require.Equal(t, "api:"+access.NewToken(tokenAlpha, "alpha", access.RoleOperator).Fingerprint(), *intent.ResolvedBy)
	require.Equal(t, "the customer changed their mind", *intent.ResolutionNote)

	resp = cancel("")
	require.Equal(t, http.StatusConflict, resp.status)
	require.Equal(t, outbox.CodeNotCancellable, resp.errorCode(t))

	resp = bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/none/cancel", token: tokenAlpha})
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, outbox.CodeNotFound, resp.errorCode(t))
}

func TestResolve(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	testrun.Dispatcher(t, bundle.pool, &dispatcher.Config{Effects: bundle.registry, Schema: bundle.schema})
	// An at-most-once effect whose outcome is lost ends unknown.
	require.Equal(t, http.StatusCreated, bundle.enqueue(t, "u", `{"effect": "noop_at_most_once", "args": {"_noop": {"fail": "ambiguous"}}}`).status)
	resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/u?wait=30s", token: tokenAlpha})
	require.Equal(t, outbox.StateUnknown, decode[outbox.Intent](t, resp).State)

	resolve := func(key, body string) *response {
		return bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/" + key + "/resolve", token: tokenAlpha, body: body})
	}
	for body, code := range map[string]string{
		`{"outcome": "maybe"}`:                 outbox.CodeInvalidArgs,
		`{}`:                                   outbox.CodeInvalidArgs,
		`{"outcome": "succeeded", "by": "me"}`: apierror.CodeInvalidJSON,
		`{"outcome": true}`:                    apierror.CodeInvalidJSON,
		``:                                     apierror.CodeInvalidJSON,
		`{"outcome": "failed", "note": 1}`:     apierror.CodeInvalidJSON,
		`{"outcome": "succeeded"} {"outcome": "x"}`: apierror.CodeInvalidJSON,
	} {
		resp := resolve("u", body)
		require.Equal(t, http.StatusBadRequest, resp.status, body)
		require.Equal(t, code, resp.errorCode(t), body)
	}

	resp = resolve("u", `{"outcome": "succeeded", "note": "checked in the provider's dashboard"}`)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	resolved := decode[outbox.Intent](t, resp)
	require.Equal(t, outbox.StateSucceeded, resolved.State)
	// The record names the token by its fingerprint, never the token.
	require.Equal(t, "api:"+access.NewToken(tokenAlpha, "alpha", access.RoleOperator).Fingerprint(), *resolved.ResolvedBy)
	require.Equal(t, "checked in the provider's dashboard", *resolved.ResolutionNote)
	require.NotNil(t, resolved.ResolvedAt)
	require.NotContains(t, string(resp.body), tokenAlpha)
	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/u", token: tokenAlpha})
	require.Equal(t, resolved.ResolvedBy, decode[outbox.Intent](t, resp).ResolvedBy)

	resp = resolve("u", `{"outcome": "failed"}`)
	require.Equal(t, http.StatusConflict, resp.status)
	require.Equal(t, outbox.CodeNotUnknown, resp.errorCode(t))

	resp = resolve("none", `{"outcome": "failed"}`)
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, outbox.CodeNotFound, resp.errorCode(t))
}

func TestNamespaces(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	post := func(token, body string) *response {
		return bundle.do(t, request{method: http.MethodPost, path: "/v1/intents", token: token,
			header: map[string]string{"Idempotency-Key": "shared"}, body: body})
	}
	a := post(tokenAlpha, `{"effect": "noop", "args": {"n": 1}}`)
	require.Equal(t, http.StatusCreated, a.status)
	b := post(tokenBeta, `{"effect": "noop", "args": {"n": 2}}`)
	require.Equal(t, http.StatusCreated, b.status, "the same key in another namespace is another intent")
	require.NotEqual(t, decode[enqueued](t, a).ID, decode[enqueued](t, b).ID)
	require.Equal(t, "beta", decode[enqueued](t, b).Namespace)
	require.NotEqual(t, decode[enqueued](t, a).ProviderKey, decode[enqueued](t, b).ProviderKey)

	// alpha's own key, which beta must not even detect.
	resp := bundle.enqueue(t, "alpha-only", `{"effect": "noop", "args": {}}`)
	require.Equal(t, http.StatusCreated, resp.status)
	for _, req := range []request{
		{method: http.MethodGet, path: "/v1/intents/alpha-only"},
		{method: http.MethodGet, path: "/v1/intents/alpha-only?wait=1s"},
		{method: http.MethodPost, path: "/v1/intents/alpha-only/cancel"},
		{method: http.MethodPost, path: "/v1/intents/alpha-only/resolve", body: `{"outcome": "failed"}`},
	} {
		req.token = tokenBeta
		resp := bundle.do(t, req)
		require.Equal(t, http.StatusNotFound, resp.status, "%s %s", req.method, req.path)
		require.Equal(t, outbox.CodeNotFound, resp.errorCode(t))
	}
	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents", token: tokenBeta})
	type page struct {
		Intents []outbox.Intent `json:"intents"`
	}
	intents := decode[page](t, resp).Intents
	require.Len(t, intents, 1)
	require.Equal(t, "beta", intents[0].Namespace)

	// alpha-only is untouched.
	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/alpha-only", token: tokenAlpha})
	require.Equal(t, outbox.StatePending, decode[outbox.Intent](t, resp).State)
}

func TestAuth(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	for name, header := range map[string]map[string]string{
		"NoToken":       {},
		"UnknownToken":  {"Authorization": "Bearer tok-gamma"},
		"PrefixOfToken": {"Authorization": "Bearer " + tokenAlpha[:10]},
		"TokenPlusMore": {"Authorization": "Bearer " + tokenAlpha + "x"},
		"Basic":         {"Authorization": "Basic " + tokenAlpha},
		"NoScheme":      {"Authorization": tokenAlpha},
		"EmptyBearer":   {"Authorization": "Bearer "},
	} {
		for _, req := range []request{
			{method: http.MethodGet, path: "/v1/intents"},
			{method: http.MethodGet, path: "/v1/intents/k"},
			{method: http.MethodPost, path: "/v1/intents", body: `{"effect": "noop", "args": {}}`},
			{method: http.MethodPost, path: "/v1/intents/k/cancel"},
			{method: http.MethodGet, path: "/v1/nothing"},
			{method: http.MethodPost, path: "/mcp", body: `{}`},
		} {
			req.header = header
			resp := bundle.do(t, req)
			require.Equal(t, http.StatusUnauthorized, resp.status, "%s %s %s", name, req.method, req.path)
			require.Equal(t, httpapi.CodeUnauthorized, resp.errorCode(t))
			require.Equal(t, `Bearer realm="outbox"`, resp.header.Get("WWW-Authenticate"))
			require.NotContains(t, string(resp.body), tokenAlpha[:10], "tokens are never echoed")
		}
	}
	require.Equal(t, 0, testdb.CountIntents(t, bundle.pool, bundle.schema))

	// The scheme is case-insensitive.
	resp := bundle.do(t, request{method: http.MethodGet, path: "/v1/intents", header: map[string]string{"Authorization": "bearer " + tokenBeta}})
	require.Equal(t, http.StatusOK, resp.status)
}

func TestNoTokens(t *testing.T) {
	t.Parallel()

	bundle := setup(t, &apiConfig{})
	resp := bundle.do(t, request{method: http.MethodPost, path: "/v1/intents",
		header: map[string]string{"Idempotency-Key": "k"}, body: `{"effect": "noop", "args": {}}`})
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	require.Equal(t, outbox.NamespaceDefault, decode[enqueued](t, resp).Namespace)

	// A bearer token is not needed, and not looked at.
	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/k", token: "anything"})
	require.Equal(t, http.StatusOK, resp.status)

	// A page whose name was rebound to 127.0.0.1 sends its own Host.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, bundle.url+"/v1/intents/k", nil)
	require.NoError(t, err)
	req.Host = "evil.example"
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusForbidden, r.StatusCode)

	// Without tokens, the handler refuses a request that did not come
	// through a loopback address, whatever serve's own check did.
	rec := httptest.NewRecorder()
	req = httptest.NewRequest(http.MethodGet, "/v1/intents/k", nil)
	req.Host = "127.0.0.1"
	req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &fakeAddr{"192.0.2.10:8080"}))
	bundle.handler.ServeHTTP(rec, req)
	require.Equal(t, http.StatusForbidden, rec.Code)
}

type fakeAddr struct{ s string }

func (a *fakeAddr) Network() string { return "tcp" }
func (a *fakeAddr) String() string  { return a.s }

func TestRoutes(t *testing.T) {
	t.Parallel()

	bundle := setup(t, nil)
	for _, tt := range []struct {
		method, path, allow string
	}{
		{http.MethodDelete, "/v1/intents", "GET, POST"},
		{http.MethodPut, "/v1/intents/k", "GET, HEAD"},
		{http.MethodPost, "/v1/intents/k", "GET, HEAD"},
		{http.MethodGet, "/v1/intents/k/cancel", "POST"},
		{http.MethodGet, "/v1/intents/k/resolve", "POST"},
	} {
		resp := bundle.do(t, request{method: tt.method, path: tt.path, token: tokenAlpha})
		require.Equal(t, http.StatusMethodNotAllowed, resp.status, "%s %s", tt.method, tt.path)
		require.Equal(t, "method_not_allowed", resp.errorCode(t))
		require.Equal(t, tt.allow, resp.header.Get("Allow"))
	}
	for _, path := range []string{"/v1/", "/v1/jobs", "/v1/intents/k/retry", "/v1/intents/k/cancel/now"} {
		resp := bundle.do(t, request{method: http.MethodGet, path: path, token: tokenAlpha})
		require.Equal(t, http.StatusNotFound, resp.status, path)
		require.Equal(t, outbox.CodeNotFound, resp.errorCode(t), path)
	}

	// A browser page of another origin is refused.
	resp := bundle.do(t, request{method: http.MethodPost, path: "/v1/intents/k/cancel", token: tokenAlpha,
		header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}})
	require.Equal(t, http.StatusForbidden, resp.status)
	require.Equal(t, outbox.CodeForbidden, resp.errorCode(t))
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()

	// Nothing is written: the shared schema of TestTx does.
	_, schema := testdb.TestTx(t.Context(), t)
	pool := testdb.Pool(t)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	guard, err := keyguard.New(pool, client, nil)
	require.NoError(t, err)
	waits, err := httpapi.NewWaits(client, 0, []string{"alpha"})
	require.NoError(t, err)
	server, err := mcpserver.New(pool, client, &mcpserver.Config{Namespace: "alpha"})
	require.NoError(t, err)
	servers := map[string]*mcp.Server{"alpha": server}
	// Each refusal names its cause: a case refused for another reason than
	// the one it sets up would otherwise pass unnoticed.
	for name, tc := range map[string]struct {
		config *httpapi.Config
		want   string
	}{
		"DuplicateToken": {&httpapi.Config{Guard: guard, MCPServers: servers, Waits: waits, Tokens: []access.Token{access.NewToken(tokenAlpha, "alpha", access.RoleAgent), access.NewToken(tokenAlpha, "beta", access.RoleAgent)}}, "entries 1 and 2 are the same token"},
		"BadNamespace":   {&httpapi.Config{Guard: guard, MCPServers: servers, Waits: waits, Tokens: []access.Token{access.NewToken(tokenAlpha, "a b", access.RoleAgent)}}, "token for an invalid namespace"},
		"NoRole":         {&httpapi.Config{Guard: guard, MCPServers: servers, Waits: waits, Tokens: []access.Token{access.NewToken(tokenAlpha, "alpha", 0)}}, "has no valid role"},
		"NoMCPServer":    {&httpapi.Config{Guard: guard, MCPServers: servers, Waits: waits, Tokens: []access.Token{access.NewToken(tokenBeta, "beta", access.RoleAgent)}}, `no MCP server for namespace "beta"`},
		"NoGuard":        {&httpapi.Config{MCPServers: servers, Waits: waits}, "Guard and Waits must be set"},
		"NoWaits":        {&httpapi.Config{Guard: guard, MCPServers: servers}, "Guard and Waits must be set"},
	} {
		_, err := httpapi.New(client, tc.config)
		require.ErrorContains(t, err, tc.want, name)
	}
	_, err = httpapi.New(nil, nil)
	require.ErrorContains(t, err, "client must not be nil")
	_, err = httpapi.NewWaits(client, -1, []string{"alpha"})
	require.ErrorContains(t, err, "MaxWaits must be positive")
}

// TestServerErrors checks that a failure of the server's own is a 500 with
// a code and no details, and is logged.
func TestServerErrors(t *testing.T) {
	t.Parallel()

	pool, schema := testdb.MigratedSchema(t)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	var logs bytes.Buffer
	h, err := newHandler(pool, client, &apiConfig{Logger: newTestLogger(&logs), Tokens: []access.Token{access.NewToken(tokenAlpha, "alpha", access.RoleOperator)}})
	require.NoError(t, err)
	// The table goes away under the API.
	_, err = pool.Exec(t.Context(), "DROP TABLE "+pgx.Identifier{schema, "outbox_intent"}.Sanitize()+" CASCADE")
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/intents/some-key", nil)
	req.Header.Set("Authorization", "Bearer "+tokenAlpha)
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, rec.Body.String(), `"code":"internal_error"`)
	require.NotContains(t, rec.Body.String(), "outbox_intent")
	require.Contains(t, logs.String(), "API request failed")
	require.Contains(t, logs.String(), "GET /v1/intents/{key}")
	require.NotContains(t, logs.String(), "some-key", "keys are not logged")
	require.NotContains(t, logs.String(), tokenAlpha)
}

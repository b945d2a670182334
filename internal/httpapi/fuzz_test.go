package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/fixture/noop"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// FuzzValidateKey checks the key validator against the documented definition (README),
// 1 to 255 printable ASCII characters (0x21 to 0x7E), on any string: it
// never panics, accepts exactly those keys, and refuses the others with
// invalid_key.
func FuzzValidateKey(f *testing.F) {
	for _, seed := range []string{"order-1234-charge", "a", "", " ", "a b", "clé", "\x00", "\x7f", "~!", "auto:charge_card:20261202T101000Z:00ff",
		string(bytes.Repeat([]byte("k"), 255)), string(bytes.Repeat([]byte("k"), 256))} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		valid := len(key) >= 1 && len(key) <= 255
		for i := 0; i < len(key); i++ {
			valid = valid && key[i] >= 0x21 && key[i] <= 0x7e
		}
		err := outbox.ValidateKey(key)
		if valid {
			require.NoError(t, err)
			return
		}
		require.Error(t, err)
		require.Equal(t, outbox.CodeInvalidKey, outbox.ErrorCode(err))
	})
}

// FuzzEnqueue sends any key and body to POST /v1/intents of the real
// handler on a real database: the answer is never a 5xx; a 4xx carries an
// error code and writes nothing; a 201 writes one intent, a 200 (duplicate)
// none.
func FuzzEnqueue(f *testing.F) {
	for _, seed := range []struct{ key, body string }{
		{"order-1", `{"effect": "noop", "args": {"amount": 1999, "currency": "eur"}}`},
		{"order-1", `{"effect": "noop", "args": {"currency": "eur", "amount": 1999.0}}`},
		{"order-1", `{"effect": "noop", "args": {"amount": 2}}`},
		{"", `{"effect": "noop", "args": {}}`},
		{"a b", `{"effect": "noop", "args": {}}`},
		{"k2", `{"effect": "refund", "args": {}}`},
		{"k3", `{"effect": "noop", "args": {"_noop": {"fail": "x"}}}`},
		{"k4", `{"effect": "noop", "args": {"n": 1e1000000}}`},
		{"k5", `{"effect": "noop", "args": {"s": "\u0000"}}`},
		{"k6", `{"effect": "noop", "args": {"s": "\ud800"}}`},
		{"k7", "{\"effect\": \"noop\", \"args\": {\"s\": \"\xff\"}}"},
		{"k8", `{"effect": "noop", "args": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`},
		{"k9", `{"effect": "noop", "args": {}, "requested_by": 7}`},
		{"k10", `{"effect": "noop", "args": {}} {}`},
		{"k11", `not json`},
	} {
		f.Add(seed.key, []byte(seed.body))
	}

	pool, schema := testdb.MigratedSchema(f)
	effect, err := noop.New(&noop.Config{Pool: pool, Schema: schema})
	require.NoError(f, err)
	registry, err := effects.NewRegistry(effect)
	require.NoError(f, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Effects: registry, Schema: schema})
	require.NoError(f, err)
	handler, err := newHandler(pool, client, &apiConfig{Tokens: []access.Token{access.NewToken(tokenAlpha, "alpha", access.RoleOperator)}})
	require.NoError(f, err)
	count := func(t *testing.T) int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT count(*) FROM "+pgx.Identifier{schema, "outbox_intent"}.Sanitize()).Scan(&n))
		return n
	}

	f.Fuzz(func(t *testing.T, key string, body []byte) {
		before := count(t)
		req := httptest.NewRequest(http.MethodPost, "/v1/intents", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokenAlpha)
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		after := count(t)

		require.Less(t, rec.Code, 500, "key %q body %q: %s", key, body, rec.Body)
		switch rec.Code {
		case http.StatusCreated:
			require.Equal(t, before+1, after)
		case http.StatusOK:
			require.Equal(t, "true", rec.Header().Get("Idempotent-Replayed"))
			require.Equal(t, before, after)
		default:
			require.GreaterOrEqual(t, rec.Code, 400)
			require.Equal(t, before, after, "a refused request wrote an intent")
			var e struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
			require.NotEmpty(t, e.Error.Code)
		}
	})
}

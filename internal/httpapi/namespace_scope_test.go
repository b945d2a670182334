package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// scopedEffect is an effect only some namespaces may use, as an MCP
// upstream's tool whose declaration names namespaces.
type scopedEffect struct {
	effects.Effect
	namespaces []string
}

func (e *scopedEffect) Namespaces() []string { return e.namespaces }

// TestNamespaceScopedEffect checks that a namespace neither lists nor
// enqueues an effect limited to other namespaces, and is told nothing of
// it beyond what an effect not enabled gets.
func TestNamespaceScopedEffect(t *testing.T) {
	t.Parallel()
	env := testdb.NewEnv(t, nil)
	scoped, err := noop.New(&noop.Config{Name: "scoped", Guarantee: effects.GuaranteeAtMostOnce, Pool: env.Pool, Schema: env.Schema})
	require.NoError(t, err)
	plain, ok := env.Registry.Get("noop")
	require.True(t, ok)
	registry, err := effects.NewRegistry(plain, &scopedEffect{Effect: scoped, namespaces: []string{"alpha"}})
	require.NoError(t, err)
	client, err := outbox.NewClient(env.Pool, &outbox.Config{Effects: registry, Schema: env.Schema})
	require.NoError(t, err)
	b := &testBundle{client: client, pool: env.Pool, registry: registry, schema: env.Schema}
	b.handler, err = newHandler(env.Pool, client, &apiConfig{Tokens: []access.Token{
		access.NewToken(tokenAlpha, "alpha", access.RoleOperator), access.NewToken(tokenBeta, "beta", access.RoleOperator),
	}})
	require.NoError(t, err)
	server := httptest.NewServer(b.handler)
	t.Cleanup(server.Close)
	b.url = server.URL

	list := func(token string) string {
		resp := b.do(t, request{method: http.MethodGet, path: "/v1/effects", token: token})
		require.Equal(t, http.StatusOK, resp.status)
		return string(resp.body)
	}
	require.Contains(t, list(tokenAlpha), `"name":"scoped"`)
	require.Contains(t, list(tokenBeta), `"name":"noop"`)
	require.NotContains(t, list(tokenBeta), `"scoped"`)

	enqueue := func(token string) *response {
		return b.do(t, request{method: http.MethodPost, path: "/v1/intents", token: token,
			header: map[string]string{"Idempotency-Key": "k"}, body: `{"effect": "scoped", "args": {}}`})
	}
	resp := enqueue(tokenBeta)
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, outbox.CodeUnknownEffect, resp.errorCode(t))
	require.Equal(t, "effect", resp.field(t))
	require.NotContains(t, string(resp.body), "alpha")
	require.Equal(t, 0, testdb.CountIntents(t, env.Pool, env.Schema), "nothing written")
	require.Equal(t, http.StatusCreated, enqueue(tokenAlpha).status)
}

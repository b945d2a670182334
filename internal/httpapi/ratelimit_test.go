package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/outbox"
)

// TestRateLimit checks that each token has its own bucket, that an enqueue
// beyond it is 429 rate_limited with Retry-After over HTTP and a
// rate_limited tool error over /mcp, and that it writes nothing, while reads
// are not limited.
func TestRateLimit(t *testing.T) {
	t.Parallel()

	// One enqueue every 100 s, two at once: the test never waits for a
	// refill.
	bundle := setup(t, &apiConfig{
		RateLimit: httpapi.RateLimit{PerSecond: 0.01, Burst: 2},
		Tokens: []access.Token{
			access.NewToken(tokenAlpha, "alpha", access.RoleAgent),
			access.NewToken(tokenBeta, "alpha", access.RoleAgent),
		},
	})
	for i, key := range []string{"k1", "k2"} {
		resp := bundle.enqueue(t, key, `{"effect": "noop", "args": {}}`)
		require.Equal(t, http.StatusCreated, resp.status, "enqueue %d: %s", i, resp.body)
	}
	resp := bundle.enqueue(t, "k3", `{"effect": "noop", "args": {}}`)
	require.Equal(t, http.StatusTooManyRequests, resp.status, "%s", resp.body)
	require.Equal(t, outbox.CodeRateLimited, resp.errorCode(t))
	retryAfter, err := strconv.Atoi(resp.header.Get("Retry-After"))
	require.NoError(t, err, resp.header.Get("Retry-After"))
	require.InDelta(t, 100, retryAfter, 2)
	require.Equal(t, 2, bundle.countIntents(t))

	// Reads are not limited.
	resp = bundle.do(t, request{method: http.MethodGet, path: "/v1/intents/k1", token: tokenAlpha})
	require.Equal(t, http.StatusOK, resp.status)

	// The other token has a bucket of its own, spent over /mcp as well.
	cs, err := bundle.connectMCP(t, tokenBeta, "")
	require.NoError(t, err)
	args := map[string]any{"customer": "cus_1", "amount": 1, "currency": "eur"}
	resp = bundle.do(t, request{method: http.MethodPost, path: "/v1/intents", token: tokenBeta,
		header: map[string]string{"Idempotency-Key": "b1", "Content-Type": "application/json"}, body: `{"effect": "noop", "args": {}}`})
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	args["idempotency_key"] = "b2"
	res, body := callTool(t, cs, "charge_card", args)
	require.False(t, res.IsError, "%s", body)
	args["idempotency_key"] = "b3"
	res, body = callTool(t, cs, "charge_card", args)
	require.True(t, res.IsError)
	require.Contains(t, string(body), `"code":"rate_limited"`)
	require.Equal(t, 4, bundle.countIntents(t))
}

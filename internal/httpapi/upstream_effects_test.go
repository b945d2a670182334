package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// upstreamToolEffect is a recorded MCP upstream tool as internal/upstream's
// Tool presents itself: its pinned schema and declared description.
type upstreamToolEffect struct{ effects.Effect }

func (e *upstreamToolEffect) Tool() string        { return "notes_create_note" }
func (e *upstreamToolEffect) Description() string { return "Creates a note (declared)." }
func (e *upstreamToolEffect) ArgsSchema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"body":{"type":"string"}},"required":["body"]}`)
}
func (e *upstreamToolEffect) UpstreamName() string { return "notes" }
func (e *upstreamToolEffect) UpstreamTool() string { return "create_note" }
func (e *upstreamToolEffect) Wait() time.Duration  { return 0 }
func (e *upstreamToolEffect) Withdrawn() string    { return "" }
func (e *upstreamToolEffect) Namespaces() []string { return nil }

// GET /v1/effects gives a recorded upstream tool its pinned schema and
// its declared description.
func TestEffectsListUpstreamTool(t *testing.T) {
	t.Parallel()
	env := testdb.NewEnv(t, nil)
	e, err := noop.New(&noop.Config{Name: "notes_create_note", Guarantee: effects.GuaranteeAtMostOnce, Pool: env.Pool, Schema: env.Schema})
	require.NoError(t, err)
	registry, err := effects.NewRegistry(&upstreamToolEffect{Effect: e})
	require.NoError(t, err)
	client, err := outbox.NewClient(env.Pool, &outbox.Config{Effects: registry, Schema: env.Schema})
	require.NoError(t, err)
	b := &testBundle{client: client, pool: env.Pool, registry: registry, schema: env.Schema}
	b.handler, err = newHandler(env.Pool, client, &apiConfig{})
	require.NoError(t, err)
	server := httptest.NewServer(b.handler)
	t.Cleanup(server.Close)
	b.url = server.URL

	resp := b.do(t, request{method: http.MethodGet, path: "/v1/effects"})
	require.Equal(t, http.StatusOK, resp.status, string(resp.body))
	var got struct {
		Effects []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			ArgsSchema  json.RawMessage `json:"args_schema"`
		} `json:"effects"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &got))
	require.Len(t, got.Effects, 1)
	require.Equal(t, "Creates a note (declared).", got.Effects[0].Description)
	require.JSONEq(t, `{"type":"object","properties":{"body":{"type":"string"}},"required":["body"]}`, string(got.Effects[0].ArgsSchema))
}

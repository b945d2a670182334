package httpapi_test

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/httpapi"
)

// TestOpenAPI drives the real handler through every route of the contract,
// the errors included, and validates each request and each answer against
// the OpenAPI document served at /v1/openapi.json, so that the document
// cannot drift from the code. It also requires that every operation of the
// document was exercised.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(httpapi.OpenAPIJSON)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(ctx))
	require.True(t, doc.IsOpenAPI31OrLater())
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)

	bundle := setup(t, nil)
	seen := map[string]map[int]bool{}
	call := func(method, path, token string, header map[string]string, body string) *response {
		t.Helper()
		req, err := http.NewRequest(method, bundle.url+path, strings.NewReader(body))
		require.NoError(t, err)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		route, params, err := router.FindRoute(req)
		if errors.Is(err, routers.ErrMethodNotAllowed) {
			// A method the document does not list: answered 405 with the
			// Allow header and the error body every error has.
			resp := bundle.do(t, request{method: method, path: path, token: token, header: header, body: body})
			require.Equal(t, http.StatusMethodNotAllowed, resp.status)
			require.NotEmpty(t, resp.header.Get("Allow"))
			var v any
			require.NoError(t, stdjson.Unmarshal(resp.body, &v))
			require.NoError(t, doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()))
			return resp
		}
		require.NoError(t, err, "%s %s is not in the document", method, path)
		in := &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		}
		// Requests the test sends wrong on purpose are not valid; the rest
		// must be.
		requestErr := openapi3filter.ValidateRequest(ctx, in)
		if body != "" {
			req.Body = io.NopCloser(strings.NewReader(body))
		}
		resp := bundle.do(t, request{method: method, path: path, token: token, header: header, body: body})
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in,
			Status:                 resp.status,
			Header:                 resp.header,
			Body:                   io.NopCloser(bytes.NewReader(resp.body)),
			Options:                &openapi3filter.Options{IncludeResponseStatus: true},
		}
		require.NoError(t, openapi3filter.ValidateResponse(ctx, out), "%s %s: %d %s", method, path, resp.status, resp.body)
		if resp.status < 400 {
			require.NoError(t, requestErr, "%s %s answered %d to a request the document refuses", method, path, resp.status)
		}
		op := route.Method + " " + route.Path
		if seen[op] == nil {
			seen[op] = map[int]bool{}
		}
		seen[op][resp.status] = true
		return resp
	}
	json := map[string]string{"Content-Type": "application/json"}
	keyed := func(key string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Idempotency-Key": key}
	}
	model := func(key string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Idempotency-Key": key, "Idempotency-Key-Source": "model"}
	}
	body := `{"effect": "noop", "args": {"n": 1}, "requested_by": "agent-7"}`

	// Enqueue: new, duplicate, the errors.
	require.Equal(t, 201, call("POST", "/v1/intents", tokenAlpha, keyed("k1"), body).status)
	require.Equal(t, 200, call("POST", "/v1/intents", tokenAlpha, keyed("k1"), body).status)
	require.Equal(t, 422, call("POST", "/v1/intents", tokenAlpha, keyed("k1"), `{"effect": "noop", "args": {"n": 2}}`).status)
	require.Equal(t, 400, call("POST", "/v1/intents", tokenAlpha, json, body).status)
	require.Equal(t, 400, call("POST", "/v1/intents", tokenAlpha, keyed("k2"), `{"effect": "fax", "args": {}}`).status)
	require.Equal(t, 400, call("POST", "/v1/intents", tokenAlpha, keyed("k2"), `{"effect": "noop"`).status)
	require.Equal(t, 401, call("POST", "/v1/intents", "", keyed("k2"), body).status)
	require.Equal(t, 413, call("POST", "/v1/intents", tokenAlpha, keyed("k2"), `{"effect": "noop", "args": {"x": "`+strings.Repeat("a", httpapi.BodyMax)+`"}}`).status)
	require.Equal(t, 201, call("POST", "/v1/intents", tokenAlpha, model("m1"), `{"effect": "charge", "args": {"customer": "c"}}`).status)
	require.Equal(t, 409, call("POST", "/v1/intents", tokenAlpha, model("m2"), `{"effect": "charge", "args": {"customer": "c"}}`).status)

	// Read, wait, list.
	require.Equal(t, 200, call("GET", "/v1/intents/k1", tokenAlpha, nil, "").status)
	require.Equal(t, 200, call("GET", "/v1/intents/k1?wait=100ms", tokenAlpha, nil, "").status)
	require.Equal(t, 400, call("GET", "/v1/intents/k1?wait=forever", tokenAlpha, nil, "").status)
	require.Equal(t, 404, call("GET", "/v1/intents/missing", tokenAlpha, nil, "").status)
	require.Equal(t, 404, call("GET", "/v1/intents/k1", tokenBeta, nil, "").status, "another namespace's key")
	require.Equal(t, 200, call("GET", "/v1/intents?limit=1&state=pending,succeeded&effect=noop", tokenAlpha, nil, "").status)
	require.Equal(t, 400, call("GET", "/v1/intents?limit=0", tokenAlpha, nil, "").status)
	require.Equal(t, 405, call("DELETE", "/v1/intents/k1", tokenAlpha, nil, "").status)

	// Cancel and resolve.
	require.Equal(t, 409, call("POST", "/v1/intents/k1/resolve", tokenAlpha, json, `{"outcome": "failed", "note": "checked"}`).status)
	require.Equal(t, 400, call("POST", "/v1/intents/k1/resolve", tokenAlpha, json, `{"outcome": "maybe"}`).status)
	require.Equal(t, 200, call("POST", "/v1/intents/k1/cancel", tokenAlpha, nil, "").status)
	require.Equal(t, 409, call("POST", "/v1/intents/k1/cancel", tokenAlpha, nil, "").status)
	require.Equal(t, 404, call("POST", "/v1/intents/missing/cancel", tokenAlpha, nil, "").status)
	// An UPDATE, not testfactory.Intent: the intent the API enqueued.
	_, err = bundle.pool.Exec(ctx, `UPDATE `+pgx.Identifier{bundle.schema, "outbox_intent"}.Sanitize()+` SET state = 'unknown', maybe_sent = true, completed_at = now() WHERE key = 'm1'`)
	require.NoError(t, err)
	require.Equal(t, 200, call("POST", "/v1/intents/m1/resolve", tokenAlpha, json, `{"outcome": "succeeded", "note": "in the dashboard"}`).status)
	require.Equal(t, 404, call("POST", "/v1/intents/missing/resolve", tokenAlpha, json, `{"outcome": "failed"}`).status)

	// Approvals: asked for by the caller, refused with other arguments,
	// approved; denied.
	asked := call("POST", "/v1/intents", tokenAlpha, keyed("a1"), `{"effect": "noop", "args": {"n": 3}, "require_approval": true}`)
	require.Equal(t, 201, asked.status)
	var awaiting struct {
		State      string `json:"state"`
		ArgsSHA256 string `json:"args_sha256"`
	}
	require.NoError(t, stdjson.Unmarshal(asked.body, &awaiting))
	require.Equal(t, "awaiting_approval", awaiting.State)
	require.Equal(t, 409, call("POST", "/v1/intents/a1/approve", tokenAlpha, json, `{"args_sha256": "`+strings.Repeat("0", 64)+`"}`).status)
	require.Equal(t, 400, call("POST", "/v1/intents/a1/approve", tokenAlpha, json, `{"note": "no hash"}`).status)
	require.Equal(t, 200, call("POST", "/v1/intents/a1/approve", tokenAlpha, json, `{"args_sha256": "`+awaiting.ArgsSHA256+`", "note": "ok"}`).status)
	require.Equal(t, 409, call("POST", "/v1/intents/a1/deny", tokenAlpha, json, `{"args_sha256": "`+awaiting.ArgsSHA256+`"}`).status)
	require.Equal(t, 201, call("POST", "/v1/intents", tokenAlpha, keyed("a2"), `{"effect": "noop", "args": {"n": 3}, "require_approval": true}`).status)
	require.Equal(t, 200, call("POST", "/v1/intents/a2/deny", tokenAlpha, json, `{"args_sha256": "`+awaiting.ArgsSHA256+`", "note": "not today"}`).status)
	require.Equal(t, 404, call("POST", "/v1/intents/missing/deny", tokenAlpha, json, `{"args_sha256": "`+awaiting.ArgsSHA256+`"}`).status)

	// Discovery, the contract.
	effects := call("GET", "/v1/effects", tokenAlpha, nil, "")
	require.Equal(t, 200, effects.status)
	require.Contains(t, string(effects.body), `"name":"charge"`)
	require.Contains(t, string(effects.body), `"dedupe_window_seconds":86400`)
	require.Equal(t, 401, call("GET", "/v1/effects", "", nil, "").status)
	require.Equal(t, 200, call("GET", "/v1/openapi.json", "", nil, "").status)

	// Every operation of the document was exercised, but /readyz: package
	// daemon serves it beside /healthz, and its TestReadyz checks it
	// against this document.
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if method+" "+path == "GET /readyz" {
				continue
			}
			require.NotEmpty(t, seen[method+" "+path], "%s %s never called", method, path)
		}
	}
}

package httpapi

import (
	_ "embed"
	"encoding/json"
	"net/http"

	"go.yaml.in/yaml/v4"
)

// openAPIYAML is the API's contract, OpenAPI 3.1: every route, header, status
// and error body. TestOpenAPI drives the real handler through each route and
// validates every request and answer against it, so the two cannot drift.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// OpenAPIJSON is the contract as JSON, as GET /v1/openapi.json serves it.
var OpenAPIJSON = func() []byte {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		panic("httpapi: openapi.yaml: " + err.Error()) // embedded: a build-time mistake
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic("httpapi: openapi.yaml: " + err.Error())
	}
	return b
}()

// openAPI is GET /v1/openapi.json, without a token: a contract is public.
func (h *Handler) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(OpenAPIJSON)
}

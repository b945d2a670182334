package httpapi_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/httpapi"
)

// TestOpenAPISnapshotOfTypeScriptClient: the TypeScript client's types are
// generated from a snapshot of the document serve publishes
// (clients/typescript/openapi.json), so that its build fails on a drift. A
// change of openapi.yaml fails here until the snapshot follows:
// clients/typescript/scripts/update-openapi.sh against a serve built from
// the change.
func TestOpenAPISnapshotOfTypeScriptClient(t *testing.T) {
	t.Parallel()

	b, err := os.ReadFile(filepath.Join("..", "..", "clients", "typescript", "openapi.json"))
	require.NoError(t, err)
	var snapshot, served any
	require.NoError(t, json.Unmarshal(b, &snapshot))
	require.NoError(t, json.Unmarshal(httpapi.OpenAPIJSON, &served))
	require.Equal(t, served, snapshot, "clients/typescript/openapi.json is stale: run clients/typescript/scripts/update-openapi.sh against a serve of this tree")
}

package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
)

// outbox's story, told with the real binary on a fresh schema:
// migrate, enqueue twice (the second a duplicate, nothing new written), once
// with other args (refused), then watch the intent succeed under serve.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A fresh, empty schema of its own rather than the migrated one.
	fresh := testdb.Schema(t)
	for i, v := range e.vars {
		if strings.HasPrefix(v, "OUTBOX_SCHEMA=") {
			e.vars[i] = "OUTBOX_SCHEMA=" + fresh
		}
	}

	out, errOut, code := e.run("migrate", "up")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "outbox")
	_, _, code = e.run("migrate", "status")
	require.Equal(t, 0, code)

	args := `{"order": 1234, "amount": 1999}`
	out, errOut, code = e.run("enqueue", "--key", "order-1234", "--effect", "noop", "--args", args)
	require.Equal(t, 0, code, errOut)
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &first))
	require.Equal(t, false, first["duplicate"])
	require.Equal(t, "pending", first["state"])

	// The same action, written differently: a duplicate.
	out, errOut, code = e.run("enqueue", "--key", "order-1234", "--effect", "noop", "--args", `{"amount":1999.0,"order":1234}`)
	require.Equal(t, 0, code, errOut)
	var second map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &second))
	require.Equal(t, true, second["duplicate"])
	require.Equal(t, first["id"], second["id"])
	require.Contains(t, errOut, "duplicate")

	_, errOut, code = e.run("enqueue", "--key", "order-1234", "--effect", "noop", "--args", `{"order": 1234, "amount": 2999}`)
	require.Equal(t, 3, code, "refused by the contract")
	require.Contains(t, errOut, "idempotency_key_reused")

	out, _, code = e.run("intents", "list", "--json")
	require.Equal(t, 0, code)
	var list struct {
		Intents []map[string]any `json:"intents"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Intents, 1, "nothing new was written")

	e.serve()
	out, errOut, code = e.run("intents", "show", "order-1234", "--wait", "60s")
	require.Equal(t, 0, code, errOut)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, "succeeded", shown["state"])
}

package intentdb_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

// Every statement renders whole: no placeholder of sql/*.sql, nor of the
// Go that builds the rest, is left, and none is empty; and each of sql/
// is the statement of its file.
func TestStatementsRendered(t *testing.T) {
	t.Parallel()
	q := intentdb.New("outbox_check")
	all := q.RenderedStatements()
	require.Greater(t, len(all), 40)
	require.Contains(t, all["sqlEnqueue"], `INSERT INTO "outbox_check".outbox_intent`)
	require.Contains(t, all["sqlDrainQueue"], `CROSS JOIN LATERAL`)
	for name, sql := range all {
		require.NotEmpty(t, strings.TrimSpace(sql), name)
		require.NotContains(t, sql, "{{", "%s keeps a placeholder:\n%s", name, sql)
	}
}

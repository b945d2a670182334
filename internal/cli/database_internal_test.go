package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/daemon"
)

func TestRedactDatabaseURL(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"postgres://outbox:hunter2@db:5432/outbox?sslmode=disable": "postgres://outbox:xxxxx@db:5432/outbox?sslmode=disable",
		"postgresql://outbox@db/outbox":                            "postgresql://outbox@db/outbox",
		"postgres://db/outbox?user=u&password=hunter2":             "postgres://db/outbox?password=xxxxx&user=u",
		"postgres://u:p%40ss@db/outbox?sslpassword=hunter2":        "postgres://u:xxxxx@db/outbox?sslpassword=xxxxx",
		"postgres://u:hunter2@[::1]:bad/outbox":                    "xxxxx",
		"host=db user=u password=hunter2 dbname=outbox":            "host=db user=u password=xxxxx dbname=outbox",
		"host=db password = 'hun ter\\'2' dbname=outbox":           "host=db password=xxxxx dbname=outbox",
		"host=db PASSWORD='it''s' sslpassword=x dbname=outbox":     "host=db PASSWORD=xxxxx sslpassword=xxxxx dbname=outbox",
	} {
		require.Equal(t, want, redactDatabaseURL(in), in)
	}
}

func TestPoolSize(t *testing.T) {
	t.Parallel()

	require.Equal(t, int32(35), daemon.PoolSize(50))
	require.Equal(t, int32(20), daemon.PoolSize(1))
	require.Equal(t, int32(5010), daemon.PoolSize(workersMax))
}

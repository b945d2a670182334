package intentdb_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

func TestCursor(t *testing.T) {
	t.Parallel()
	for _, id := range []int64{1, 42, 1 << 40, 1<<63 - 1} {
		got, ok := intentdb.DecodeCursor(intentdb.EncodeCursor(id))
		require.True(t, ok)
		require.Equal(t, id, got)
	}
	// The form is fixed: cursors handed out before stay valid.
	require.Equal(t, "aWQ6NDI", intentdb.EncodeCursor(42))
	for _, bad := range []string{"", "garbage", "aWQ6MA" /* id:0 */, "aWQ6LTE" /* id:-1 */, "eDo0Mg" /* x:42 */} {
		_, ok := intentdb.DecodeCursor(bad)
		require.False(t, ok, bad)
	}
}

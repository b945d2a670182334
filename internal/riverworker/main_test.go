package riverworker_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/outbox-dev/outbox/internal/testdb"
)

// TestMain runs the tests against the test database, then checks that they
// left no goroutine running (batchers, drains, River clients).
func TestMain(m *testing.M) {
	code := testdb.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

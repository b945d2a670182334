package daemon_test

import (
	"testing"

	"github.com/outbox-dev/outbox/internal/testdb"
)

func TestMain(m *testing.M) {
	testdb.Main(m)
}

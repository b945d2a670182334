package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoopbackListenAddr(t *testing.T) {
	t.Parallel()

	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true,
		"127.1.2.3:0":    true,
		"[::1]:8080":     true,
		"localhost:8080": true,
		"LOCALHOST:8080": true,
		":8080":          false,
		"0.0.0.0:8080":   false,
		"[::]:8080":      false,
		"10.0.0.5:8080":  false,
		"example.com:80": false,
		"garbage":        false,
	} {
		require.Equal(t, want, loopbackListenAddr(addr), addr)
	}
}

package cli

import (
	"encoding/base64"
	"strings"

	"github.com/outbox-dev/outbox/internal/mcpserver"
)

// StateKeyValue returns OUTBOX_STATE_KEY decoded: nil when unset, or when
// it is not 32 bytes of standard or URL-safe base64.
func (c *Config) StateKeyValue() []byte {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(strings.TrimSpace(c.StateKey)); err == nil && len(b) == mcpserver.StateKeySize {
			return b
		}
	}
	return nil
}

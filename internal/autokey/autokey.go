// Package autokey derives MCP's automatic idempotency key (docs/agents.md,
// "Keys for agents"): when a mutating tool call carries no idempotency_key,
// identical calls (same tool, same arguments as JSON values) within one
// window of the first are one action.
//
// The arguments are hashed in their canonical form, RFC 8785 (JSON
// Canonicalization Scheme), so that key order, white space, escapes and the
// spelling of numbers (1, 1.0, 1e0) do not change the key: the same rule that
// PostgreSQL's jsonb equality applies when it decides that two requests are
// the same action. The two agree except where RFC 8785 is narrower than
// jsonb, and Canonicalize then refuses the arguments rather than guess:
// numbers outside IEEE 754 double range, and duplicate object names. Numbers
// that differ only beyond double precision (integers above 2^53, for
// example) share one canonical form while jsonb tells them apart; such a pair
// of calls gets one automatic key and the second is refused as
// idempotency_key_reused, never executed twice.
//
// The key names the window it was derived in: Key(tool, args, start) is the
// key of the window starting at start. Which window a call belongs to is the
// caller's decision (package mcpserver: the window of the first identical
// call, when that call is less than one window old).
package autokey

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gowebpki/jcs"
)

// Prefix starts every automatic key, so that operators and agents can tell
// them from keys given by callers.
const Prefix = "auto:"

// hashVersion is mixed into every hash, so that a future change of the
// derivation cannot collide with keys derived by this one.
const hashVersion = "outbox auto key v1"

// windowLayout formats a window's start in a key: compact, sortable, UTC.
const windowLayout = "20060102T150405Z"

// Canonicalize returns args, a JSON value, in canonical form (RFC 8785). It
// refuses invalid JSON, invalid UTF-8, duplicate object names and numbers
// that are not finite IEEE 754 doubles.
func Canonicalize(args []byte) ([]byte, error) {
	if args == nil {
		return nil, fmt.Errorf("args: no JSON value")
	}
	canonical, err := jcs.Transform(args)
	if err != nil {
		return nil, fmt.Errorf("args cannot be put in canonical form (RFC 8785): %w", err)
	}
	return canonical, nil
}

// WindowStart returns the start of the window of length window that t falls
// in. Windows are aligned to the Unix epoch, so every replica computes the
// same windows from the same clock.
func WindowStart(t time.Time, window time.Duration) time.Time {
	if window <= 0 {
		panic("autokey: window must be positive")
	}
	ns := t.UnixNano()
	start := ns - ns%int64(window)
	if ns%int64(window) < 0 {
		start -= int64(window)
	}
	return time.Unix(0, start).UTC()
}

// Key returns the automatic key of a call of tool with arguments canonical
// (as returned by Canonicalize) in the window starting at windowStart:
//
//	auto:<tool>:<window start, UTC>:<hex SHA-256>
//
// for example auto:charge_card:20261202T101000Z:9f2c… (98 characters for
// charge_card; 87 plus the tool's name in general). The hash covers the tool, the window start to the
// nanosecond and the canonical arguments; the key contains no argument, since
// arguments can carry personal data.
func Key(tool string, canonical []byte, windowStart time.Time) string {
	h := sha256.New()
	writeField(h, []byte(hashVersion))
	writeField(h, []byte(tool))
	writeField(h, []byte(strconv.FormatInt(windowStart.UnixNano(), 10)))
	writeField(h, canonical)
	var b strings.Builder
	b.Grow(len(Prefix) + len(tool) + len(windowLayout) + 2 + hex.EncodedLen(sha256.Size))
	b.WriteString(Prefix)
	b.WriteString(tool)
	b.WriteByte(':')
	b.WriteString(windowStart.UTC().Format(windowLayout))
	b.WriteByte(':')
	b.WriteString(hex.EncodeToString(h.Sum(nil)))
	return b.String()
}

// LockID returns a 64-bit number naming the action (namespace, tool,
// canonical arguments) across windows, for a transaction-level advisory lock
// that serializes identical calls while one of them picks its window.
func LockID(namespace, tool string, canonical []byte) int64 {
	h := sha256.New()
	writeField(h, []byte(hashVersion+" lock"))
	writeField(h, []byte(namespace))
	writeField(h, []byte(tool))
	writeField(h, canonical)
	return int64(binary.BigEndian.Uint64(h.Sum(nil)[:8])) //nolint:gosec // any 64 bits will do
}

// writeField writes b length-prefixed, so that no two sequences of fields
// hash alike ("ab","c" and "a","bc").
func writeField(h interface{ Write([]byte) (int, error) }, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	_, _ = h.Write(n[:])
	_, _ = h.Write(b)
}

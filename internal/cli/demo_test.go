package cli_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/cli"
)

// TestDemo runs outboxd demo --exit as a newcomer would, with no environment
// at all: it starts its own PostgreSQL, tells the story and exits 0 only if
// every check held.
func TestDemo(t *testing.T) {
	t.Parallel()

	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := cli.Run(t.Context(), []string{"demo", "--exit"}, &cli.RunOpts{
		Lookuper: envconfig.MapLookuper(map[string]string{}),
		Stderr:   &stderr,
		Stdout:   &stdout,
	})
	out := stdout.String()
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr.String())
	t.Logf("demo took %s", time.Since(start).Round(time.Millisecond))

	require.Contains(t, out, "a throwaway PostgreSQL on a Unix socket in ")
	require.Contains(t, out, "... with outbox: the tool records an intent") // the progress line
	// The side-by-side table: two charges without outbox, one with it, and
	// the retries answered as duplicates.
	// (Outbox's requests are 2 unless its retry came while Stripe still
	// held the first: then a 409 and a third.)
	require.Regexp(t, `at Stripe\s+3 requests, 2 charges\s+\d+ requests, 1 charge\n`, out)
	require.Regexp(t, `call 2\s+the framework retries\s+409 idempotency_key_in_use\s+200 duplicate of intent \d+`, out)
	require.Regexp(t, `call 3\s+the model calls again\s+200 pi_\S+\s+200 duplicate of intent \d+`, out)
	// The summary table of calls against effects.
	require.Regexp(t, `charge\s+without outbox\s+3\s+3\s+2 charges`, out)
	require.Regexp(t, `charge\s+with outbox\s+3\s+\d+\s+1 charge\s+succeeded`, out)
	require.Regexp(t, `email\s+with outbox\s+2\s+1\s+1 email\s+unknown`, out)
	require.Regexp(t, `ticket\s+with outbox\s+1\s+1 \(and 1 look-up\)\s+1 ticket\s+succeeded, reconciled`, out)
	// Part 4: approvals.
	require.Regexp(t, `the agent asks\s+250\.00 EUR: answered awaiting_approval \(rule charge:amount>=10000\), 0 charges\n`, out)
	require.Regexp(t, `a wrong approval\s+args_sha256 of 25\.00 EUR instead: approval_mismatch; still awaiting_approval\n`, out)
	require.Regexp(t, `the right one\s+args_sha256 [0-9a-f]{12}…: succeeded, 1 charge\n`, out)
	require.Contains(t, out, "ok     an approval for other arguments was refused (approval_mismatch) and released nothing")
	require.NotContains(t, out, "FAILED")
	require.Contains(t, out, "Every check held.")
	require.Regexp(t, `River UI  http://127\.0\.0\.1:\d+/riverui/\n`, out)
	require.Regexp(t, `metrics   http://127\.0\.0\.1:\d+/metrics\n`, out)
	require.Empty(t, strings.TrimSpace(stderr.String()), "logs are off unless OUTBOX_LOG_LEVEL is set")
}

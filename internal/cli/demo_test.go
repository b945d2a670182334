package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/cli"
)

// TestDemo runs outboxd demo as a newcomer would, with no environment at
// all: it starts its own PostgreSQL, tells the story, and keeps serving. The
// test then sends the resolve command the demo printed, as printed, to the
// server the demo keeps running (so that the hint cannot drift from the
// API), and stops the demo as Ctrl-C would: exit status 0 only if every
// check held.
func TestDemo(t *testing.T) {
	t.Parallel()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout := newNotifyingBuffer()
	var stderr bytes.Buffer
	start := time.Now()
	codeCh := make(chan int, 1)
	go func() {
		codeCh <- cli.Run(ctx, []string{"demo"}, &cli.RunOpts{
			Lookuper: envconfig.MapLookuper(map[string]string{}),
			Stderr:   &stderr,
			Stdout:   stdout,
		})
	}()

	// The demo prints the resolve command last, then serves until Ctrl-C.
	resolveLine := regexp.MustCompile(`(?m)^\s+(curl .*/resolve .*)\n`)
	var command string
	deadline := time.After(5 * time.Minute)
	for command == "" {
		select {
		case <-stdout.written:
			if m := resolveLine.FindStringSubmatch(stdout.String()); m != nil {
				command = m[1]
			}
		case code := <-codeCh:
			require.FailNow(t, "demo ended before printing the resolve command", "exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		case <-deadline:
			require.FailNow(t, "no resolve command printed in time", "stdout:\n%s", stdout.String())
		}
	}
	t.Logf("story told in %s", time.Since(start).Round(time.Millisecond))

	req := curlRequest(t, ctx, command)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var intent struct {
		Key   string `json:"key"`
		State string `json:"state"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&intent))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s answered %+v", command, intent)
	require.Equal(t, "succeeded", intent.State)

	cancel()
	var code int
	select {
	case code = <-codeCh:
	case <-time.After(time.Minute):
		require.FailNow(t, "demo did not stop after Ctrl-C")
	}
	out := stdout.String()
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr.String())

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
	require.Contains(t, out, "outboxd keeps serving until Ctrl-C:\n")
	require.Regexp(t, `River UI  http://127\.0\.0\.1:\d+/riverui/\n`, out)
	require.Regexp(t, `console   http://127\.0\.0\.1:\d+/console/\n`, out)
	require.Regexp(t, `metrics   http://127\.0\.0\.1:\d+/metrics\n`, out)
	require.Contains(t, out, "\nstopping\n")
	require.Empty(t, strings.TrimSpace(stderr.String()), "logs are off unless OUTBOX_LOG_LEVEL is set")
}

// TestDemoResolveCommandWithToken checks the command the demo prints when
// API tokens are set: the token goes in a header that sh expands.
func TestDemoResolveCommandWithToken(t *testing.T) {
	t.Parallel()

	command := cli.ResolveCommand("http://127.0.0.1:8080", "email/1", true)
	req := curlRequest(t, t.Context(), command)
	require.Equal(t, "Bearer $TOKEN", req.Header.Get("Authorization"))
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))
	require.Equal(t, http.MethodPost, req.Method)
	require.Equal(t, "http://127.0.0.1:8080/v1/intents/email%2F1/resolve", req.URL.String())
}

// curlRequest builds the request that curl would send for command, a curl
// command line as sh would split it (words in single or double quotes, no
// expansion), with the options the demo prints: -X, -H and -d. Like curl,
// -d makes a POST whose Content-Type is application/x-www-form-urlencoded
// unless a -H says otherwise.
func curlRequest(t *testing.T, ctx context.Context, command string) *http.Request {
	t.Helper()

	words := shellWords(t, command)
	require.Equal(t, "curl", words[0], "not a curl command: %s", command)
	method, target, body := "", "", ""
	var hasBody bool
	header := http.Header{}
	for i := 1; i < len(words); i++ {
		arg := func() string {
			i++
			require.Less(t, i, len(words), "%s needs an argument: %s", words[i-1], command)
			return words[i]
		}
		switch w := words[i]; {
		case w == "-X" || w == "--request":
			method = arg()
		case w == "-H" || w == "--header":
			name, value, ok := strings.Cut(arg(), ":")
			require.True(t, ok, "a header without a colon: %s", command)
			header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		case w == "-d" || w == "--data":
			body, hasBody = arg(), true
		case strings.HasPrefix(w, "-"):
			require.FailNow(t, "an option curlRequest does not know", "%s in %s", w, command)
		default:
			require.Empty(t, target, "two URLs: %s", command)
			target = w
		}
	}
	if hasBody {
		if header.Get("Content-Type") == "" {
			header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if method == "" {
			method = http.MethodPost
		}
	}
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = header
	return req
}

// shellWords splits a command line as sh would, without expansions: words
// separated by blanks, quoted with '…' or "…".
func shellWords(t *testing.T, line string) []string {
	t.Helper()

	var words []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; c {
		case ' ', '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case '\'', '"':
			end := strings.IndexByte(line[i+1:], c)
			require.GreaterOrEqual(t, end, 0, "unclosed %c in %s", c, line)
			word.WriteString(line[i+1 : i+1+end])
			i += 1 + end
			inWord = true
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// notifyingBuffer is a bytes.Buffer safe for concurrent use whose writes are
// signalled on written (dropped when a signal is already pending).
type notifyingBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

func newNotifyingBuffer() *notifyingBuffer {
	return &notifyingBuffer{written: make(chan struct{}, 1)}
}

func (b *notifyingBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	select {
	case b.written <- struct{}{}:
	default:
	}
	return n, err
}

func (b *notifyingBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

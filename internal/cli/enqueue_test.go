package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/cli"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

func TestEnqueue(t *testing.T) {
	t.Parallel()

	t.Run("NewThenDuplicate", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		res := bundle.run(t, "enqueue", "--key", "order-1", "--effect", "noop", "--args", `{"n": 1}`, "--requested-by", "agent-7")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "created intent order-1\n", res.stderr)
		first := decode[enqueued](t, res.stdout)
		require.False(t, first.Duplicate)
		require.Equal(t, "order-1", first.Key)
		require.Equal(t, outbox.NamespaceDefault, first.Namespace)
		require.Equal(t, "noop", first.Effect)
		require.JSONEq(t, `{"n": 1}`, string(first.Args))
		require.Equal(t, outbox.StatePending, first.State)
		require.Equal(t, "agent-7", *first.RequestedBy)
		// Who enqueued, from the credentials: the command line's user.
		require.NotNil(t, first.EnqueuedBy)
		require.Equal(t, access.CLIActor(), *first.EnqueuedBy)
		require.Contains(t, res.stdout, `"duplicate": false`)

		res = bundle.run(t, "enqueue", "--key", "order-1", "--effect", "noop", "--args", `{"n":1}`)
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "duplicate: intent order-1 already recorded (state pending)\n", res.stderr)
		second := decode[enqueued](t, res.stdout)
		require.True(t, second.Duplicate)
		require.Equal(t, first.ID, second.ID)
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))

		res = bundle.run(t, "enqueue", "--key", "order-1", "--effect", "noop", "--args", `{"n": 2}`)
		require.Equal(t, cli.ExitRefused, res.code)
		require.Empty(t, res.stdout)
		require.True(t, strings.HasPrefix(res.stderr, "outboxd: idempotency_key_reused: "), res.stderr)
		require.Equal(t, 1, strings.Count(res.stderr, "\n"))
		require.Equal(t, 1, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// Nothing written, by any case. The cases below run in parallel:
		// t.Run returns as each one pauses, so a count after the loop
		// would run before any of them did. A cleanup runs once all of
		// them have ended (and before the schema is handed back); the
		// schema is this test's alone, so all of its intents are the
		// cases'. assert, not require: a FailNow in a cleanup drops the
		// message from go test's output without -v.
		t.Cleanup(func() {
			assert.Equal(t, 0, testdb.CountIntents(t, bundle.pool, bundle.schema), "nothing written")
		})

		for name, tt := range map[string]struct {
			args   []string
			prefix string
		}{
			"InvalidJSON":   {[]string{"--key", "k", "--effect", "noop", "--args", `{"n": `}, "outboxd: invalid_args: args: "},
			"NotAnObject":   {[]string{"--key", "k", "--effect", "noop", "--args", `[1]`}, "outboxd: invalid_args: args: "},
			"EffectArgs":    {[]string{"--key", "k", "--effect", "noop", "--args", `{"_noop": {"hang": "sideways"}}`}, "outboxd: invalid_args: args._noop.hang: "},
			"InvalidKey":    {[]string{"--key", "a key", "--effect", "noop", "--args", `{}`}, "outboxd: invalid_key: key: "},
			"EmptyKey":      {[]string{"--key", "", "--effect", "noop", "--args", `{}`}, "outboxd: invalid_key: key: "},
			"UnknownEffect": {[]string{"--key", "k", "--effect", "fax", "--args", `{}`}, "outboxd: unknown_effect: effect: "},
			"NoFile":        {[]string{"--key", "k", "--effect", "noop", "--args", "@/nonexistent/args.json"}, "outboxd: error reading --args: "},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				res := bundle.run(t, append([]string{"enqueue"}, tt.args...)...)
				require.Equal(t, 1, res.code, res.stderr)
				require.Empty(t, res.stdout)
				require.True(t, strings.HasPrefix(res.stderr, tt.prefix), "got %q, want prefix %q", res.stderr, tt.prefix)
				require.Equal(t, 1, strings.Count(res.stderr, "\n"))
			})
		}
	})

	t.Run("ArgsFromFileAndStdin", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		path := filepath.Join(t.TempDir(), "args.json")
		require.NoError(t, os.WriteFile(path, []byte(`{"from": "file"}`+"\n"), 0o600))
		res := bundle.run(t, "enqueue", "--key", "from-file", "--effect", "noop", "--args", "@"+path)
		require.Equal(t, 0, res.code, res.stderr)
		require.JSONEq(t, `{"from": "file"}`, string(decode[enqueued](t, res.stdout).Args))

		res = runEnv(t, bundle.env, strings.NewReader(`{"from": "stdin"}`), "enqueue", "--key", "from-stdin", "--effect", "noop", "--args", "-")
		require.Equal(t, 0, res.code, res.stderr)
		require.JSONEq(t, `{"from": "stdin"}`, string(decode[enqueued](t, res.stdout).Args))
	})

	t.Run("Namespace", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		res := runEnv(t, with(bundle.env, "OUTBOX_NAMESPACE", "tenant-a"), nil, "enqueue", "--key", "k", "--effect", "noop", "--args", "{}")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "tenant-a", decode[enqueued](t, res.stdout).Namespace)

		res = bundle.run(t, "enqueue", "--key", "k", "--effect", "noop", "--args", "{}", "--namespace", "tenant-b")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "tenant-b", decode[enqueued](t, res.stdout).Namespace)
		require.Equal(t, 2, testdb.CountIntents(t, bundle.pool, bundle.schema))
	})

	t.Run("WithoutEffects", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		env := with(bundle.env, "OUTBOX_SANDBOX", "false")

		// No effect enabled: any valid name is accepted, and only the
		// arguments' shape is checked.
		res := runEnv(t, env, nil, "enqueue", "--key", "k", "--effect", "charge", "--args", `{"amount": 1}`)
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "charge", decode[enqueued](t, res.stdout).Effect)

		res = runEnv(t, env, nil, "enqueue", "--key", "k2", "--effect", "Not-A-Name", "--args", `{}`)
		require.Equal(t, 1, res.code)
		require.True(t, strings.HasPrefix(res.stderr, "outboxd: unknown_effect: "), res.stderr)
	})
}

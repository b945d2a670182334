package cli_test

import (
	"context"
	"maps"
	"os/user"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/cli"
	"github.com/outbox-dev/outbox/outbox"
)

type intentList struct {
	Intents    []*outbox.Intent `json:"intents"`
	NextCursor *string          `json:"next_cursor"`
}

func TestIntents(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	for _, key := range []string{"a-1", "a-2", "a-3"} {
		res := bundle.run(t, "enqueue", "--key", key, "--effect", "noop", "--args", `{}`)
		require.Equal(t, 0, res.code, res.stderr)
	}
	res := bundle.run(t, "enqueue", "--key", "b-1", "--effect", "noop_at_most_once", "--args", `{}`)
	require.Equal(t, 0, res.code, res.stderr)

	t.Run("ListTable", func(t *testing.T) {
		res := bundle.run(t, "intents", "list")
		require.Equal(t, 0, res.code, res.stderr)
		lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
		require.Len(t, lines, 5)
		require.Regexp(t, `^KEY\s+STATE\s+EFFECT\s+ATTEMPTS\s+CREATED_AT$`, lines[0])
		require.Regexp(t, `^b-1\s+pending\s+noop_at_most_once\s+0\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, lines[1])
		require.Regexp(t, `^a-1\s+pending\s+noop\s+0\s+`, lines[4])
		require.Equal(t, "namespace default (another: --namespace NS or OUTBOX_NAMESPACE)\n", res.stderr)
	})

	// With the API tokens in namespace shop and OUTBOX_NAMESPACE unset, the
	// table of namespace default is empty: the listing says whose it is,
	// how to choose another, and that the tokens name shop.
	t.Run("ListSaysWhichNamespace", func(t *testing.T) {
		env := with(bundle.env, "OUTBOX_API_TOKENS", "shop-token-0123456789:shop:agent,ops-token-0123456789:shop:operator")
		res := runEnv(t, env, nil, "intents", "list", "--state", "succeeded")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "KEY  STATE  EFFECT  ATTEMPTS  CREATED_AT\n", res.stdout)
		require.Equal(t, "namespace default (another: --namespace NS or OUTBOX_NAMESPACE; the API tokens also name shop)\n", res.stderr)

		res = runEnv(t, env, nil, "intents", "list", "--namespace", "shop")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "namespace shop (another: --namespace NS or OUTBOX_NAMESPACE)\n", res.stderr)

		// JSON is for programs: no note.
		res = runEnv(t, env, nil, "intents", "list", "--json")
		require.Equal(t, 0, res.code, res.stderr)
		require.Empty(t, res.stderr)
	})

	t.Run("ListJSONPages", func(t *testing.T) {
		res := bundle.run(t, "intents", "list", "--json", "--limit", "3")
		require.Equal(t, 0, res.code, res.stderr)
		page := decode[intentList](t, res.stdout)
		require.Len(t, page.Intents, 3)
		require.Equal(t, "b-1", page.Intents[0].Key)
		require.NotNil(t, page.NextCursor)

		res = bundle.run(t, "intents", "list", "--json", "--limit", "3", "--cursor", *page.NextCursor)
		require.Equal(t, 0, res.code, res.stderr)
		page = decode[intentList](t, res.stdout)
		require.Len(t, page.Intents, 1)
		require.Equal(t, "a-1", page.Intents[0].Key)
		require.Nil(t, page.NextCursor)
		require.Contains(t, res.stdout, `"next_cursor": null`)

		res = bundle.run(t, "intents", "list", "--limit", "3")
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stderr, "more intents: add --cursor ")
	})

	t.Run("ListFilters", func(t *testing.T) {
		res := bundle.run(t, "intents", "list", "--json", "--effect", "noop_at_most_once")
		require.Equal(t, 0, res.code, res.stderr)
		require.Len(t, decode[intentList](t, res.stdout).Intents, 1)

		res = bundle.run(t, "intents", "list", "--json", "--state", "succeeded,failed")
		require.Equal(t, 0, res.code, res.stderr)
		require.Empty(t, decode[intentList](t, res.stdout).Intents)
		require.Contains(t, res.stdout, `"intents": []`)

		res = bundle.run(t, "intents", "list", "--state", "lost")
		require.Equal(t, 1, res.code)
		require.True(t, strings.HasPrefix(res.stderr, "outboxd: invalid_args: state: "), res.stderr)

		res = bundle.run(t, "intents", "list", "--cursor", "nonsense")
		require.Equal(t, 1, res.code)
		require.True(t, strings.HasPrefix(res.stderr, "outboxd: invalid_args: cursor: "), res.stderr)

		res = runEnv(t, with(bundle.env, "OUTBOX_NAMESPACE", "other"), nil, "intents", "list", "--json")
		require.Equal(t, 0, res.code, res.stderr)
		require.Empty(t, decode[intentList](t, res.stdout).Intents)

		// --namespace wins over OUTBOX_NAMESPACE.
		res = runEnv(t, with(bundle.env, "OUTBOX_NAMESPACE", "other"), nil, "intents", "list", "--json", "--namespace", "default")
		require.Equal(t, 0, res.code, res.stderr)
		require.NotEmpty(t, decode[intentList](t, res.stdout).Intents)
		res = bundle.run(t, "intents", "show", "a-2", "--namespace", "other", "--json")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "not_found")
	})

	t.Run("Show", func(t *testing.T) {
		res := bundle.run(t, "intents", "show", "a-2")
		require.Equal(t, 0, res.code, res.stderr)
		intent := decode[outbox.Intent](t, res.stdout)
		require.Equal(t, "a-2", intent.Key)
		require.Equal(t, outbox.StatePending, intent.State)
		require.NotContains(t, res.stdout, "duplicate")
		require.NotContains(t, res.stdout, "sent_args", "nothing sent yet")

		// What an attempt sent an upstream (its marker applied) is shown
		// beside the intent.
		_, err := bundle.pool.Exec(context.Background(), `UPDATE `+pgx.Identifier{bundle.schema, "outbox_intent"}.Sanitize()+
			` SET sent_args = '{"attempt": 2, "arguments": {"body": "hi <!-- outbox:pk -->"}}' WHERE key = 'a-2'`)
		require.NoError(t, err)
		res = bundle.run(t, "intents", "show", "a-2", "--json")
		require.Equal(t, 0, res.code, res.stderr)
		shown := decode[struct {
			outbox.Intent
			SentArgs struct {
				Attempt   int            `json:"attempt"`
				Arguments map[string]any `json:"arguments"`
			} `json:"sent_args"`
		}](t, res.stdout)
		require.Equal(t, "a-2", shown.Key)
		require.Equal(t, 2, shown.SentArgs.Attempt)
		require.Equal(t, "hi <!-- outbox:pk -->", shown.SentArgs.Arguments["body"])
		require.NotContains(t, res.stderr, "console:", "no public URL, no link")

		// With OUTBOX_PUBLIC_URL, the console's page of the intent.
		env := maps.Clone(bundle.env)
		env["OUTBOX_PUBLIC_URL"] = "https://outbox.example.com/"
		res = runEnv(t, env, nil, "intents", "show", "a-2")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "console: https://outbox.example.com/console/intents/default/a-2\n", res.stderr)

		res = bundle.run(t, "intents", "show", "missing")
		require.Equal(t, 1, res.code)
		require.Empty(t, res.stdout)
		require.Equal(t, "outboxd: not_found: no intent with this key\n", res.stderr)

		res = runEnv(t, with(bundle.env, "OUTBOX_NAMESPACE", "other"), nil, "intents", "show", "a-2")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "not_found")
	})

	t.Run("ShowWaitTimesOut", func(t *testing.T) {
		// No serve runs: the intent stays pending.
		res := bundle.run(t, "intents", "show", "a-3", "--wait", "200ms")
		require.Equal(t, 1, res.code)
		require.Equal(t, outbox.StatePending, decode[outbox.Intent](t, res.stdout).State)
		require.Equal(t, "outboxd: intent a-3 is still pending after 200ms\n", res.stderr)
	})

	t.Run("CancelAndResolve", func(t *testing.T) {
		res := bundle.run(t, "intents", "resolve", "a-1", "--outcome", "failed")
		require.Equal(t, cli.ExitRefused, res.code)
		require.Equal(t, "outboxd: not_unknown: intent is pending\n", res.stderr)

		res = bundle.run(t, "intents", "cancel", "a-1", "--note", "ordered twice")
		require.Equal(t, 0, res.code, res.stderr)
		cancelled := decode[outbox.Intent](t, res.stdout)
		require.Equal(t, outbox.StateCancelled, cancelled.State)
		require.Equal(t, "cancelled intent a-1\n", res.stderr)
		// The record names the command line's user.
		u, err := user.Current()
		require.NoError(t, err)
		require.Equal(t, "cli:"+u.Username, *cancelled.ResolvedBy)
		require.Equal(t, "ordered twice", *cancelled.ResolutionNote)

		res = bundle.run(t, "intents", "cancel", "a-1")
		require.Equal(t, cli.ExitRefused, res.code)
		require.Equal(t, "outboxd: not_cancellable: intent is cancelled\n", res.stderr)

		res = bundle.run(t, "intents", "cancel", "missing")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "outboxd: not_found: ")

		// Terminal now, so waiting returns at once.
		res = bundle.run(t, "intents", "show", "--wait", "10s", "a-1")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, outbox.StateCancelled, decode[outbox.Intent](t, res.stdout).State)
	})
}

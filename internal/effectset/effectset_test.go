package effectset_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/effectfile"
	"github.com/outbox-dev/outbox/internal/effectset"
	"github.com/outbox-dev/outbox/internal/metrics"
	"github.com/outbox-dev/outbox/internal/upstream"
	"github.com/outbox-dev/outbox/outbox"
)

// notifyFile declares one HTTP effect on loopback, whose base comes from
// {env.CHAT_URL}.
const notifyFile = `effects:
  notify_team:
    description: Post a message to the team's channel.
    guarantee: deduplicated
    dedupe_window: 24h
    args:
      type: object
      required: [text]
      properties: {text: {type: string}, amount: {type: string}}
    request:
      url: "{env.CHAT_URL}/messages"
      headers: {Idempotency-Key: "{provider_key}"}
      body: {text: "{args.text}"}
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func chatEnv(name string) (string, bool) { return "http://127.0.0.1:9", name == "CHAT_URL" }

func TestBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Nothing", func(t *testing.T) {
		t.Parallel()
		set, err := effectset.Build(ctx, nil, nil)
		require.NoError(t, err)
		defer set.Close()
		require.Empty(t, set.Registry.Names())
		require.NotNil(t, set.Upstreams)
		require.Empty(t, set.Passthrough())
		require.NotNil(t, set.Metrics, "counters of its own")
		require.Nil(t, set.Sandbox)
	})

	t.Run("Providers", func(t *testing.T) {
		t.Parallel()
		set, err := effectset.Build(ctx, &effectset.Config{Providers: effectset.Providers{
			StripeKey: "sk_test_x", StripeURL: "https://api.stripe.com",
			ZendeskURL: "https://acme.zendesk.com", ZendeskEmail: "a@example.com", ZendeskToken: "t",
		}}, nil)
		require.NoError(t, err)
		defer set.Close()
		require.Equal(t, []string{"charge", "ticket"}, set.Registry.Names())
	})

	// Validation (enqueue, mcp) builds the sandbox's effects pointed at
	// nothing; serve starts the stand-ins, and Close stops them.
	t.Run("Sandbox", func(t *testing.T) {
		t.Parallel()
		validating, err := effectset.Build(ctx, &effectset.Config{Sandbox: true}, nil)
		require.NoError(t, err)
		defer validating.Close()
		require.Nil(t, validating.Sandbox)

		serving, err := effectset.Build(ctx, &effectset.Config{Sandbox: true, StartSandbox: true}, nil)
		require.NoError(t, err)
		require.NotNil(t, serving.Sandbox)
		require.Equal(t, validating.Registry.Names(), serving.Registry.Names())
		for _, name := range []string{"charge", "email", "ticket", "webhook", "noop", "noop_reconcilable", "noop_at_most_once"} {
			_, ok := serving.Registry.Get(name)
			require.True(t, ok, name)
		}
		require.Equal(t, serving.Sandbox.Stripe.URL(), serving.Providers.StripeURL)
		serving.Close()
	})

	t.Run("DeclaredEffects", func(t *testing.T) {
		t.Parallel()
		m := metrics.NewEffects()
		set, err := effectset.Build(ctx, &effectset.Config{
			EffectsFile:   writeFile(t, "effects.yaml", notifyFile),
			LookupEnvFunc: chatEnv,
		}, m)
		require.NoError(t, err)
		defer set.Close()
		require.Equal(t, []string{"notify_team"}, set.Registry.Names())
		require.Same(t, m, set.Metrics)
	})

	t.Run("BadFile", func(t *testing.T) {
		t.Parallel()
		_, err := effectset.Build(ctx, &effectset.Config{
			EffectsFile:   writeFile(t, "effects.yaml", "effects:\n  charge: {guarantee: at_most_once}\n"),
			LookupEnvFunc: chatEnv,
		}, nil)
		var fileErrs effectfile.FileErrors
		require.ErrorAs(t, err, &fileErrs)
		require.ErrorContains(t, err, "the name of a built-in effect")
	})

	// An approval rule on a declared effect must name an argument of its
	// schema: one that never matches would let intents run unapproved.
	t.Run("ApprovalRuleThatCannotMatch", func(t *testing.T) {
		t.Parallel()
		rules, err := outbox.ParseApprovalRules("notify_team:amount>100")
		require.NoError(t, err)
		_, err = effectset.Build(ctx, &effectset.Config{
			ApprovalRules: rules,
			EffectsFile:   writeFile(t, "effects.yaml", notifyFile),
			LookupEnvFunc: chatEnv,
		}, nil)
		var ruleErr *effectset.ApprovalRuleError
		require.ErrorAs(t, err, &ruleErr)
		require.Equal(t, "notify_team", ruleErr.Rule.Effect)
		require.ErrorContains(t, err, "not declared a number")
	})

	// Upstreams without their lock refuse start, naming the command.
	t.Run("UpstreamsWithoutLock", func(t *testing.T) {
		t.Parallel()
		path := writeFile(t, "effects.yaml", "upstreams:\n  notes:\n    command: [notes-server]\n")
		_, err := effectset.Build(ctx, &effectset.Config{EffectsFile: path}, nil)
		require.ErrorIs(t, err, upstream.ErrLockMissing)
		require.Equal(t, path+".lock", effectset.LockPath("", path))
		require.Equal(t, "/etc/x.lock", effectset.LockPath("/etc/x.lock", path))
	})
}

// TakenNames holds every built-in effect and outbox tool, so no mirrored
// upstream tool takes one.
func TestTakenNames(t *testing.T) {
	t.Parallel()
	taken := effectset.TakenNames()
	names, tools := effectset.BuiltinNames()
	for _, n := range append(names, tools...) {
		require.Contains(t, taken, n)
	}
	require.Contains(t, taken, "charge")
	require.Contains(t, taken, "noop")
}

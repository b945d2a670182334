package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const declaredFile = `effects:
  refund:
    preset: stripe.refund
  ping:
    description: Ping a service once.
    guarantee: at_most_once
    args: {type: object, properties: {note: {type: string}}}
    request:
      url: "{env.PING_URL}/ping?token={env.PING_TOKEN}"
      body: {note: "{args.note}"}
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestEffectsCommands(t *testing.T) {
	t.Parallel()

	file := writeFile(t, "effects.yaml", declaredFile)
	env := map[string]string{"STRIPE_KEY": "sk_live_do_not_print", "PING_URL": "http://127.0.0.1:9", "PING_TOKEN": "tok_do_not_print"}

	t.Run("CheckPrintsToolsAndSchemasWithoutSecrets", func(t *testing.T) {
		t.Parallel()
		res := runEnv(t, env, nil, "effects", "check", file)
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, `"tool": "refund_payment"`)
		require.Contains(t, res.stdout, `"url": "{env.PING_URL}/ping?token={env.PING_TOKEN}"`)
		require.Contains(t, res.stdout, "2 effects, valid")
		require.NotContains(t, res.stdout+res.stderr, "do_not_print")
	})
	t.Run("CheckRefusesNamingFileEffectAndField", func(t *testing.T) {
		t.Parallel()
		broken := writeFile(t, "broken.yaml", strings.Replace(declaredFile, "guarantee: at_most_once", "guarantee: deduplicated", 1))
		res := runEnv(t, env, nil, "effects", "check", broken)
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "broken.yaml:5: effect ping: dedupe_window: required")
		require.Contains(t, res.stderr, "broken.yaml:9: effect ping: request: a deduplicated effect must send {provider_key}")
		require.Equal(t, 2, strings.Count(strings.TrimSpace(res.stderr), "\n")+1, "a problem a line: %s", res.stderr)
	})
	t.Run("CheckReportsEveryProblemOneALine", func(t *testing.T) {
		t.Parallel()
		broken := writeFile(t, "broken.yaml", strings.NewReplacer(
			"    description: Ping a service once.\n", "",
			"guarantee: at_most_once", "guarantee: deduplicated",
			"body: {note:", "retries: 3\n      body: {note:",
		).Replace(declaredFile))
		res := runEnv(t, env, nil, "effects", "check", broken)
		require.Equal(t, 1, res.code)
		require.Empty(t, res.stdout)
		lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
		require.Len(t, lines, 4, res.stderr)
		for i, want := range []string{
			"broken.yaml:5: effect ping: description: required",
			"broken.yaml:5: effect ping: dedupe_window: required",
			"broken.yaml:8: effect ping: request: a deduplicated effect must send {provider_key}",
			"broken.yaml:9: effect ping: request.retries: unknown field",
		} {
			require.True(t, strings.HasPrefix(lines[i], "outboxd: "+filepath.Dir(broken)), res.stderr)
			require.Contains(t, lines[i], want, res.stderr)
		}
	})
	t.Run("CheckRefusesANameRiverRefuses", func(t *testing.T) {
		t.Parallel()
		// serve would refuse it as a River queue: check refuses it first.
		broken := writeFile(t, "broken.yaml", strings.Replace(declaredFile, "  ping:", "  pay__now_:", 1))
		res := runEnv(t, env, nil, "effects", "check", broken)
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "broken.yaml:5: effect pay__now_: an effect's name must be a lowercase letter")
	})
	t.Run("CheckWithoutEnv", func(t *testing.T) {
		t.Parallel()
		res := runEnv(t, map[string]string{}, nil, "effects", "check", file)
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "the environment variable")
		res = runEnv(t, map[string]string{}, nil, "effects", "check", "--no-env", file)
		require.Equal(t, 0, res.code, res.stderr)
	})
	t.Run("ListShowsBuiltInAndDeclared", func(t *testing.T) {
		t.Parallel()
		res := runEnv(t, with(env, "OUTBOX_EFFECTS_FILE", file, "OUTBOX_STRIPE_KEY", "sk_test_x"), nil, "effects", "list", "--json")
		require.Equal(t, 0, res.code, res.stderr)
		var out struct {
			Effects []struct{ Name, Guarantee, Tool, Source string }
		}
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
		got := map[string]string{}
		for _, e := range out.Effects {
			got[e.Name] = e.Source + " " + e.Guarantee + " " + e.Tool
		}
		require.Equal(t, map[string]string{
			"charge": "built-in deduplicated charge_card",
			"refund": "declared deduplicated refund_payment",
			"ping":   "declared at_most_once ping",
		}, got)
	})
	t.Run("BadFileStopsAtStart", func(t *testing.T) {
		t.Parallel()
		broken := writeFile(t, "broken.yaml", "effects:\n  ping: {guarantee: at_most_once}\n")
		res := runEnv(t, with(env, "OUTBOX_EFFECTS_FILE", broken), nil, "effects", "list")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "broken.yaml:2: effect ping: description: required")
	})
}

// An approval rule on a declared effect must name a top-level argument of
// its schema, and a numeric comparison a numeric one: the configuration is
// refused (serve, mcp, enqueue and effects list build the same effects),
// naming OUTBOX_APPROVAL.
func TestApprovalRulesOnDeclaredEffects(t *testing.T) {
	t.Parallel()

	file := writeFile(t, "effects.yaml", declaredFile)
	env := map[string]string{
		"STRIPE_KEY": "sk_x", "PING_URL": "http://127.0.0.1:9", "PING_TOKEN": "t",
		"OUTBOX_EFFECTS_FILE": file,
	}
	for rule, want := range map[string]string{
		"refund:amout>=100":      `has no top-level argument "amout"`,
		"refund:reason>=100":     `argument "reason" is not declared a number or integer`,
		"ping:note=x,refund:x=1": `has no top-level argument "x"`,
	} {
		res := runEnv(t, with(env, "OUTBOX_APPROVAL", rule), nil, "effects", "list")
		require.Equal(t, 1, res.code, rule)
		require.Contains(t, res.stderr, "OUTBOX_APPROVAL", rule)
		require.Contains(t, res.stderr, want, rule)
	}
	res := runEnv(t, with(env, "OUTBOX_APPROVAL", "refund:amount>=10000,ping"), nil, "effects", "list")
	require.Equal(t, 0, res.code, res.stderr)
}

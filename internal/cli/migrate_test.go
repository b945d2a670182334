package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/migrations"
)

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("StatusUpToDate", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		res := bundle.run(t, "migrate", "status")
		require.Equal(t, 0, res.code, res.stderr)
		require.Regexp(t, `(?m)^river   current (\d+) latest (\d+)$`, res.stdout)
		require.Contains(t, res.stdout, "outbox  current 020 latest 020\n")
		require.Contains(t, res.stdout, "\nup to date\n")
	})

	// migrate print's SQL, applied by another tool, leaves the schema as
	// migrate up would: current, and working.
	t.Run("Print", func(t *testing.T) {
		t.Parallel()
		schema := testdb.Schema(t)
		env := map[string]string{"DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": schema, "OUTBOX_SANDBOX": "true"}

		res := runEnv(t, env, nil, "migrate", "print")
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, "-- river 001 ")
		require.Contains(t, res.stdout, "-- outbox 012 noop_effect_out\n")
		sql := res.stdout
		// Printing changes nothing.
		res = runEnv(t, env, nil, "migrate", "status")
		require.Contains(t, res.stdout, "\npending migrations\n")

		// As a tool runs it: each migration's section at once, but the
		// statements of one that must run outside a transaction one by
		// one.
		for i, section := range strings.Split(sql, "\n-- outbox ") {
			if i > 0 {
				section = "-- outbox " + section
			}
			if !strings.Contains(section, migrations.NoTransactionNote) {
				_, err := testdb.Pool(t).Exec(t.Context(), section)
				require.NoError(t, err)
				continue
			}
			for _, st := range strings.SplitAfter(section, ";\n") {
				if strings.TrimSpace(st) == "" {
					continue
				}
				_, err := testdb.Pool(t).Exec(t.Context(), st)
				require.NoError(t, err, st)
			}
		}

		res = runEnv(t, env, nil, "migrate", "status")
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, "\nup to date\n", res.stdout)
		res = runEnv(t, env, nil, "migrate", "up")
		require.Equal(t, "already up to date\n", res.stdout)
		res = runEnv(t, env, nil, "migrate", "print")
		require.Equal(t, 0, res.code, res.stderr)
		require.NotContains(t, res.stdout, "BEGIN;")
		res = runEnv(t, env, nil, "enqueue", "--key", "printed-1", "--effect", "noop", "--args", "{}")
		require.Equal(t, 0, res.code, res.stderr)
	})

	t.Run("UpDownStatus", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{"DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": testdb.Schema(t)}

		res := runEnv(t, env, nil, "migrate", "status")
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, "river   current 000")
		require.Contains(t, res.stdout, "outbox  current 000 latest 020\n")
		require.Contains(t, res.stdout, "\npending migrations\n")

		res = runEnv(t, env, nil, "migrate", "up")
		require.Equal(t, 0, res.code, res.stderr)
		require.Regexp(t, `^(applied river \d{3} .+\n)+applied outbox 001 intents\napplied outbox 002 self_healing\napplied outbox 003 model_key_guard\napplied outbox 004 audit\napplied outbox 005 least_privilege\napplied outbox 006 approvals\napplied outbox 007 cheaper_insert\napplied outbox 008 checks_in_trigger\napplied outbox 009 enqueued_by\napplied outbox 010 process_liveness\napplied outbox 011 declaration_sha256\napplied outbox 012 noop_effect_out\napplied outbox 013 intent_traceparent\napplied outbox 014 hot_intent\napplied outbox 015 hot_intent_indexes\napplied outbox 016 mcp_host_approval\napplied outbox 017 intent_checkpoint\napplied outbox 018 upstream_lock\napplied outbox 019 sent_args\napplied outbox 020 cancel_request\n$`, res.stdout)
		riverApplied := len(regexp.MustCompile(`(?m)^applied river`).FindAllString(res.stdout, -1))

		res = runEnv(t, env, nil, "migrate", "up")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "already up to date\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "status")
		require.Contains(t, res.stdout, "\nup to date\n")

		for _, m := range []string{"020 cancel_request", "019 sent_args", "018 upstream_lock", "017 intent_checkpoint", "016 mcp_host_approval", "015 hot_intent_indexes", "014 hot_intent", "013 intent_traceparent", "012 noop_effect_out", "011 declaration_sha256", "010 process_liveness", "009 enqueued_by", "008 checks_in_trigger"} {
			res = runEnv(t, env, nil, "migrate", "down")
			require.Equal(t, 0, res.code, res.stderr)
			require.Equal(t, "reverted outbox "+m+"\n", res.stdout)
		}

		res = runEnv(t, env, nil, "migrate", "down")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "reverted outbox 007 cheaper_insert\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "down")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "reverted outbox 006 approvals\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "down")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "reverted outbox 005 least_privilege\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "down")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "reverted outbox 004 audit\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "down")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "reverted outbox 003 model_key_guard\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "down")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "reverted outbox 002 self_healing\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "down")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "reverted outbox 001 intents\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "down")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "nothing to revert\n", res.stdout)

		res = runEnv(t, env, nil, "migrate", "status")
		require.Contains(t, res.stdout, "outbox  current 000 latest 020\n")
		require.Contains(t, res.stdout, "\npending migrations\n")

		res = runEnv(t, env, nil, "migrate", "status", "--json")
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, `"up_to_date": false`)

		// Unmigrated: the read commands say what to do.
		res = runEnv(t, env, nil, "intents", "list")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "has no outbox tables: run outboxd migrate up")
		res = runEnv(t, env, nil, "intents", "show", "k")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "has no outbox tables: run outboxd migrate up")

		res = runEnv(t, env, nil, "migrate", "down", "--all", "--yes")
		require.Equal(t, 0, res.code, res.stderr)
		require.Len(t, regexp.MustCompile(`(?m)^reverted river \d{3} `).FindAllString(res.stdout, -1), riverApplied)

		res = runEnv(t, env, nil, "migrate", "status")
		require.Contains(t, res.stdout, "river   current 000")
	})
}

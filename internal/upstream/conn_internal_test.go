package upstream

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects/declared"
)

// A child gets only what inherit and env name: an empty inherit list, or
// one whose variables are unset, with no env, gives it an empty
// environment, never outboxd's (exec.Cmd's nil Env means the parent's).
func TestChildEnvironmentOnlyDeclared(t *testing.T) {
	t.Setenv("OUTBOX_TEST_LEAK", "outboxd's own secret")
	for name, decl := range map[string]string{
		"EmptyInherit":      "    inherit: []\n",
		"InheritUnset":      "    inherit: [OUTBOX_TEST_NOT_SET]\n",
		"InheritAndEnvUsed": "    inherit: [OUTBOX_TEST_NOT_SET]\n    env: {A: \"{env.TOKEN}\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := "upstreams:\n  up:\n    command: [sh]\n" + decl
			f, err := ParseFile("effects.yaml", []byte(file), &declared.Config{LookupEnv: func(n string) (string, bool) {
				return "token-value-1234", n == "TOKEN"
			}})
			require.NoError(t, err)
			c := NewConn(f.Upstreams[0], nil)
			t.Cleanup(c.Close)
			cmd, err := c.command(c.members[0])
			require.NoError(t, err)
			require.NotNil(t, cmd.Env, "a nil Env hands the child outboxd's whole environment")
			for _, kv := range cmd.Env {
				require.Equal(t, "A=token-value-1234", kv)
			}
		})
	}
}

package access_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
)

func TestRole(t *testing.T) {
	t.Parallel()

	roles := []access.Role{access.RoleReader, access.RoleAgent, access.RoleOperator}
	for i, have := range roles {
		for j, need := range roles {
			require.Equal(t, i >= j, have.Allows(need), "%s allows %s", have, need)
		}
		parsed, err := access.ParseRole(have.String())
		require.NoError(t, err)
		require.Equal(t, have, parsed)
	}
	require.Equal(t, []string{"reader", "agent", "operator"}, []string{roles[0].String(), roles[1].String(), roles[2].String()})

	var none access.Role
	require.False(t, none.Valid())
	require.False(t, none.Allows(access.RoleReader))
	require.False(t, access.RoleOperator.Allows(none))
	_, err := access.ParseRole("admin")
	require.EqualError(t, err, `the role "admin" is not reader, agent or operator`)
	_, err = access.ParseRole("Agent")
	require.Error(t, err)

	var r access.Role
	require.NoError(t, r.UnmarshalText([]byte("operator")))
	require.Equal(t, access.RoleOperator, r)
	b, err := r.MarshalText()
	require.NoError(t, err)
	require.Equal(t, "operator", string(b))
}

func TestParseTokens(t *testing.T) {
	t.Parallel()

	sum := sha256.Sum256([]byte("tok-hashed-0123456789"))
	tokens, err := access.ParseTokens(" tok-alpha-0123456789:alpha , tok-beta-01234567890:beta:reader,sha256:" + hex.EncodeToString(sum[:]) + ":ops:operator,")
	require.NoError(t, err)
	require.Len(t, tokens, 3)
	require.Equal(t, "alpha", tokens[0].Namespace)
	require.Equal(t, access.RoleDefault, tokens[0].Role)
	require.Equal(t, access.RoleAgent, tokens[0].Role)
	require.Equal(t, "tok-alpha-0123456789", tokens[0].Secret())
	require.Equal(t, access.RoleReader, tokens[1].Role)
	require.Equal(t, sum, tokens[2].Hash)
	require.Empty(t, tokens[2].Secret(), "a token given by its hash cannot be sent")
	require.Equal(t, access.RoleOperator, tokens[2].Role)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:6]), tokens[2].Fingerprint())
	require.Equal(t, "api:"+tokens[2].Fingerprint(), tokens[2].Actor())
	require.Equal(t, access.NewToken("tok-alpha-0123456789", "alpha", access.RoleAgent), tokens[0])

	for entry, msg := range map[string]string{
		"short:alpha":                                   "entry 1: the token is shorter than 16 characters",
		"tok-alpha-0123456789":                          "entry 1: expected token:namespace[:role] (a token cannot contain a colon)",
		"tok-alpha-0123456789:alpha:admin":              `entry 1: the role "admin" is not reader, agent or operator`,
		"tok-alpha-0123456789:a b":                      `entry 1: the namespace "a b" is invalid`,
		"sha256:abc:alpha":                              "entry 1: the hash must be 64 hex digits",
		"sha256:" + strings.Repeat("0", 64):             "entry 1: expected sha256:<64 hex digits>:namespace[:role]",
		"tok-alpha-0123456789:a,tok-alpha-0123456789:b": "entries 1 and 2 are the same token",
	} {
		_, err := access.ParseTokens(entry)
		require.ErrorContains(t, err, msg, entry)
		require.NotContains(t, err.Error(), "tok-alpha", "errors never quote the token")
	}
}

func TestParseTokenFile(t *testing.T) {
	t.Parallel()

	tokens, err := access.ParseTokenFile("# agents\ntok-alpha-0123456789:alpha\n\n  tok-ops-0123456789:alpha:operator\n")
	require.NoError(t, err)
	require.Len(t, tokens, 2)
	require.Equal(t, access.RoleOperator, tokens[1].Role)

	_, err = access.ParseTokenFile("tok-alpha-0123456789:alpha\nshort:alpha\n")
	require.EqualError(t, err, "line 2: the token is shorter than 16 characters")
}

func TestActor(t *testing.T) {
	t.Parallel()

	require.Equal(t, "api:local", access.APIActor(access.ActorLocal))
	require.True(t, strings.HasPrefix(access.CLIActor(), "cli"))
	require.Equal(t, "console:sha256:0123456789ab", access.ConsoleActor("sha256:0123456789ab"))
}

func TestMatch(t *testing.T) {
	t.Parallel()

	tokens := []access.Token{
		access.NewToken("tok-alpha-0123456789", "alpha", access.RoleAgent),
		access.NewToken("tok-ops-0123456789ab", "alpha", access.RoleOperator),
	}
	got, ok := access.Match(tokens, "tok-ops-0123456789ab")
	require.True(t, ok)
	require.Equal(t, tokens[1], got)
	_, ok = access.Match(tokens, "tok-ops-0123456789a")
	require.False(t, ok)
	_, ok = access.Match(nil, "")
	require.False(t, ok)
}

func TestAllow(t *testing.T) {
	t.Parallel()

	for action, need := range map[access.Action]access.Role{
		access.ActionRead:    access.RoleReader,
		access.ActionEnqueue: access.RoleAgent,
		access.ActionCancel:  access.RoleAgent,
		access.ActionResolve: access.RoleOperator,
		access.ActionApprove: access.RoleOperator,
		access.ActionDeny:    access.RoleOperator,
	} {
		require.Equal(t, need, action.Role(), action)
		for _, role := range []access.Role{access.RoleReader, access.RoleAgent, access.RoleOperator} {
			require.Equal(t, role.Allows(need), access.Allow(role, action), "%s %s", role, action)
			require.Equal(t, role.Allows(need), access.AllowNamed([]string{"x", role.String()}, action), "%s %s", role, action)
		}
	}
	require.False(t, access.Allow(access.RoleOperator, access.Action("delete")))
	require.False(t, access.AllowNamed(nil, access.ActionRead))
	require.False(t, access.AllowNamed([]string{"admin"}, access.ActionRead))
}

func TestFromLoopback(t *testing.T) {
	t.Parallel()

	request := func(host string, local net.Addr) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil)
		if local != nil {
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, local))
		}
		return r
	}
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	public := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 8080}

	require.True(t, access.FromLoopback(request("localhost:8080", loopback)))
	require.True(t, access.FromLoopback(request("[::1]:8080", nil)))
	require.False(t, access.FromLoopback(request("localhost:8080", public)))
	require.False(t, access.FromLoopback(request("evil.example:8080", loopback)), "a rebound DNS name")
	require.False(t, access.ViaLoopback(request("localhost:8080", public)))
	require.True(t, access.IsLoopbackAddr("127.0.0.2"))
	require.False(t, access.IsLoopbackAddr(":8080"))
}

func TestBasicAuthMatches(t *testing.T) {
	t.Parallel()

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	require.False(t, access.BasicAuthMatches(r, "", ""), "no credentials sent")
	r.SetBasicAuth("ops", "secret")
	require.True(t, access.BasicAuthMatches(r, "ops", "secret"))
	require.False(t, access.BasicAuthMatches(r, "ops", "secret2"))
	require.False(t, access.BasicAuthMatches(r, "ops2", "secret"))
}

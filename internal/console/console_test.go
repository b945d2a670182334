package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/console"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The bundle's tokens: an operator, a reader and an agent of namespace
// alpha, and an operator of beta.
const (
	tokenOperator = "tok-operator-alpha-0123"
	tokenReader   = "tok-reader-alpha-01234"
	tokenAgent    = "tok-agent-alpha-012345"
	tokenBeta     = "tok-operator-beta-0123"
	uiUser        = "ops"
	uiPassword    = "correct-horse-battery"
)

var tokens = []access.Token{
	access.NewToken(tokenOperator, "alpha", access.RoleOperator),
	access.NewToken(tokenReader, "alpha", access.RoleReader),
	access.NewToken(tokenAgent, "alpha", access.RoleAgent),
	access.NewToken(tokenBeta, "beta", access.RoleOperator),
}

type testBundle struct {
	client *outbox.Client
	pool   *pgxpool.Pool
	schema string
	url    string
}

// setup serves the console on a fresh schema over a real HTTP server, with
// the bundle's tokens and River UI user (nil config) or config.
func setup(t *testing.T, config *console.Config) *testBundle {
	t.Helper()
	env := testdb.NewEnv(t, map[string]effects.Guarantee{"noop": effects.GuaranteeDeduplicated, "email": effects.GuaranteeAtMostOnce})
	pool, schema, client := env.Pool, env.Schema, env.Client
	if config == nil {
		config = &console.Config{Tokens: tokens, UIUser: uiUser, UIPassword: uiPassword}
	}
	config.Schema = schema
	h, err := console.New(pool, client, config)
	require.NoError(t, err)
	server := httptest.NewServer(h)
	t.Cleanup(server.Close)
	return &testBundle{client: client, pool: pool, schema: schema, url: server.URL}
}

// enqueue records an intent in namespace.
func (b *testBundle) enqueue(t *testing.T, namespace, key, effect string, args map[string]any, approval bool) *outbox.Intent {
	t.Helper()
	res, err := b.client.Enqueue(context.Background(), &outbox.EnqueueParams{
		Namespace: namespace, Key: key, Effect: effect, Args: args, RequireApproval: approval,
	})
	require.NoError(t, err)
	return res.Intent
}

// unknown writes an intent where a lost outcome leaves it: unknown, maybe
// sent, with the attempt's error.
func (b *testBundle) unknown(t *testing.T, namespace, key, effect string, args map[string]any) *outbox.Intent {
	t.Helper()
	encoded, err := json.Marshal(args)
	require.NoError(t, err)
	return testfactory.Intent(context.Background(), t, b.pool, &testfactory.IntentOpts{
		Args: encoded, Attempt: testfactory.Ptr(1), CompletedAt: testfactory.Ptr(time.Now()), Effect: effect,
		Error: json.RawMessage(`{"code": "outcome_lost", "message": "the outcome was lost"}`), Key: key,
		MaybeSent: testfactory.Ptr(true), Namespace: namespace, Schema: b.schema, State: outbox.StateUnknown,
	})
}

func (b *testBundle) get(t *testing.T, namespace, key string) *outbox.Intent {
	t.Helper()
	intent, err := b.client.Get(context.Background(), namespace, key)
	require.NoError(t, err)
	return intent
}

// answer is a response, read.
type answer struct {
	status   int
	body     string
	location string
	cookies  []*http.Cookie
}

// request sends method path with form (a POST's body) and the session
// cookie, never following redirects. Cookies are carried by hand: the
// session cookie is Secure, and Go's cookie jar keeps Secure cookies for
// https only.
func (b *testBundle) request(t *testing.T, method, path string, form url.Values, session *http.Cookie, headers ...string) *answer {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.url+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if session != nil {
		req.AddCookie(session)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b2, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &answer{status: resp.StatusCode, body: string(b2), location: resp.Header.Get("Location"), cookies: resp.Cookies()}
}

// login signs in with token and returns the session cookie.
func (b *testBundle) login(t *testing.T, token string) *http.Cookie {
	t.Helper()
	a := b.request(t, http.MethodPost, "/console/login", url.Values{"token": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	require.Len(t, a.cookies, 1)
	return a.cookies[0]
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "alpha", "secret-key-1", "noop", map[string]any{"n": "secret-arg-value"}, false)

	t.Run("RedirectWithoutSession", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/console/", "/console/intents", "/console/intents/alpha/secret-key-1", "/console/unknown", "/console/approvals", "/console/counts.json", "/console/bulk/cancel"} {
			a := b.request(t, http.MethodGet, path, nil, nil)
			require.Equal(t, http.StatusSeeOther, a.status, path)
			require.True(t, strings.HasPrefix(a.location, "/console/login?next="), a.location)
			require.NotContains(t, a.body, "secret-arg-value")
			require.NotContains(t, a.body, "noop", "not even the effect")
		}
		a := b.request(t, http.MethodGet, "/console/login", nil, nil)
		require.Equal(t, http.StatusOK, a.status)
		require.Contains(t, a.body, `name="token"`)
		// A forged session is no session.
		a = b.request(t, http.MethodGet, "/console/intents", nil, &http.Cookie{Name: "outbox_console", Value: "forged"})
		require.Equal(t, http.StatusSeeOther, a.status)
		// Nor is a token sent as the cookie.
		a = b.request(t, http.MethodGet, "/console/intents", nil, &http.Cookie{Name: "outbox_console", Value: tokenOperator})
		require.Equal(t, http.StatusSeeOther, a.status)
	})

	t.Run("Tokens", func(t *testing.T) {
		t.Parallel()
		a := b.request(t, http.MethodPost, "/console/login", url.Values{"token": {tokenAgent}}, nil)
		require.Equal(t, http.StatusForbidden, a.status)
		require.Contains(t, a.body, "agent")
		require.Empty(t, a.cookies)
		a = b.request(t, http.MethodPost, "/console/login", url.Values{"token": {"tok-nobody-0123456789"}}, nil)
		require.Equal(t, http.StatusUnauthorized, a.status)
		require.Empty(t, a.cookies)

		a = b.request(t, http.MethodPost, "/console/login", url.Values{"token": {tokenOperator}, "next": {"/console/unknown"}}, nil)
		require.Equal(t, http.StatusSeeOther, a.status)
		require.Equal(t, "/console/unknown", a.location)
		require.Len(t, a.cookies, 1)
		c := a.cookies[0]
		require.True(t, c.Secure)
		require.True(t, c.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, c.SameSite)
		require.NotContains(t, c.Value, tokenOperator)
		page := b.request(t, http.MethodGet, "/console/intents", nil, c)
		require.Equal(t, http.StatusOK, page.status)
		require.Contains(t, page.body, "secret-key-1")

		// The sign-in page sends nobody elsewhere.
		a = b.request(t, http.MethodPost, "/console/login", url.Values{"token": {tokenReader}, "next": {"https://evil.example/"}}, nil)
		require.Equal(t, "/console/", a.location)

		// Signed out, the cookie is nothing.
		a = b.request(t, http.MethodPost, "/console/logout", url.Values{}, c)
		require.Equal(t, http.StatusSeeOther, a.status)
		require.Equal(t, http.StatusSeeOther, b.request(t, http.MethodGet, "/console/intents", nil, c).status)
	})

	t.Run("BasicAuthUser", func(t *testing.T) {
		t.Parallel()
		a := b.request(t, http.MethodGet, "/console/login/basic", nil, nil)
		require.Equal(t, http.StatusUnauthorized, a.status)
		req, _ := http.NewRequest(http.MethodGet, b.url+"/console/intents", nil)
		req.SetBasicAuth(uiUser, "wrong-password-here")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "/console/login", resp.Request.URL.Path, "a wrong password is sent to sign in")

		req, _ = http.NewRequest(http.MethodGet, b.url+"/console/login/basic", nil)
		req.SetBasicAuth(uiUser, uiPassword)
		resp, err = (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Len(t, resp.Cookies(), 1)
		page := b.request(t, http.MethodGet, "/console/", nil, resp.Cookies()[0])
		require.Equal(t, http.StatusOK, page.status)
		require.Contains(t, page.body, "console:ops")
	})
}

// A reader sees everything of its namespace and no button, and a forged
// POST is 403 and changes nothing; an operator sees the forms.
func TestRoles(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.unknown(t, "alpha", "lost-email", "email", map[string]any{"to": "ada@example.com"})
	waiting := b.enqueue(t, "alpha", "big-one", "noop", map[string]any{"amount": 25000}, true)
	b.enqueue(t, "alpha", "queued", "noop", map[string]any{"n": 2}, false)
	reader, operator := b.login(t, tokenReader), b.login(t, tokenOperator)

	for _, path := range []string{"/console/unknown", "/console/approvals", "/console/intents/alpha/lost-email", "/console/intents/alpha/queued", "/console/intents", "/console/"} {
		a := b.request(t, http.MethodGet, path, nil, reader)
		require.Equal(t, http.StatusOK, a.status, path)
		require.NotContains(t, a.body, `method="post" action="/console/intents/`, path)
		require.NotContains(t, a.body, "/console/bulk/cancel", path)
		require.Contains(t, a.body, "reader", path)
	}
	require.Contains(t, b.request(t, http.MethodGet, "/console/unknown", nil, reader).body, "lost-email")
	require.Contains(t, b.request(t, http.MethodGet, "/console/approvals", nil, reader).body, waiting.ArgsSHA256)

	for _, post := range []struct{ path, field, value string }{
		{"/console/intents/alpha/lost-email/resolve", "outcome", "succeeded"},
		{"/console/intents/alpha/big-one/approve", "args_sha256", waiting.ArgsSHA256},
		{"/console/intents/alpha/big-one/deny", "args_sha256", waiting.ArgsSHA256},
		{"/console/intents/alpha/queued/cancel", "note", "x"},
	} {
		a := b.request(t, http.MethodPost, post.path, url.Values{post.field: {post.value}, "note": {"forged"}}, reader)
		require.Equal(t, http.StatusForbidden, a.status, post.path)
		require.Contains(t, a.body, "forbidden")
	}
	a := b.request(t, http.MethodPost, "/console/bulk/cancel", url.Values{"count": {"1"}, "confirm": {"yes"}}, reader)
	require.Equal(t, http.StatusForbidden, a.status)
	require.Equal(t, outbox.StateUnknown, b.get(t, "alpha", "lost-email").State)
	require.Equal(t, outbox.StateAwaitingApproval, b.get(t, "alpha", "big-one").State)
	require.Equal(t, outbox.StatePending, b.get(t, "alpha", "queued").State)

	for _, path := range []string{"/console/unknown", "/console/approvals", "/console/intents/alpha/queued"} {
		a := b.request(t, http.MethodGet, path, nil, operator)
		require.Contains(t, a.body, `method="post" action="/console/intents/alpha/`, path)
	}
}

// A token sees its namespace only: another's intent is a plain 404, and
// absent from every list; the River UI user sees every namespace.
func TestNamespaces(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "alpha", "alpha-key", "noop", map[string]any{"n": 1}, false)
	b.enqueue(t, "beta", "beta-key", "noop", map[string]any{"n": 1}, false)
	b.enqueue(t, "beta", "beta-waits", "noop", map[string]any{"n": 2}, true)
	alpha := b.login(t, tokenOperator)

	for _, path := range []string{"/console/intents", "/console/intents?namespace=beta", "/console/approvals", "/console/"} {
		a := b.request(t, http.MethodGet, path, nil, alpha)
		require.Equal(t, http.StatusOK, a.status, path)
		require.NotContains(t, a.body, "beta-key", path)
		require.NotContains(t, a.body, "beta-waits", path)
	}
	require.Contains(t, b.request(t, http.MethodGet, "/console/intents", nil, alpha).body, "alpha-key")
	require.Equal(t, http.StatusNotFound, b.request(t, http.MethodGet, "/console/intents/beta/beta-key", nil, alpha).status)
	waiting := b.get(t, "beta", "beta-waits")
	a := b.request(t, http.MethodPost, "/console/intents/beta/beta-waits/approve", url.Values{"args_sha256": {waiting.ArgsSHA256}}, alpha)
	require.Equal(t, http.StatusNotFound, a.status)
	require.Equal(t, outbox.StateAwaitingApproval, b.get(t, "beta", "beta-waits").State)

	req, _ := http.NewRequest(http.MethodGet, b.url+"/console/intents", nil)
	req.SetBasicAuth(uiUser, uiPassword)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "alpha-key")
	require.Contains(t, string(body), "beta-key")
}

// Approvals are for exactly the args shown: another args_sha256 is
// approval_mismatch and releases nothing; the right one approves, recorded
// as console:<fingerprint>.
func TestApprove(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	waiting := b.enqueue(t, "alpha", "big-charge", "noop", map[string]any{"amount": 25000}, true)
	denied := b.enqueue(t, "alpha", "other-charge", "noop", map[string]any{"amount": 30000}, true)
	operator := b.login(t, tokenOperator)
	actor := access.ConsoleActor(tokens[0].Fingerprint())

	other := outbox.ArgsSHA256([]byte(`{"amount": 250}`))
	a := b.request(t, http.MethodPost, "/console/intents/alpha/big-charge/approve", url.Values{"args_sha256": {other}, "note": {"ok"}}, operator)
	require.Equal(t, http.StatusConflict, a.status)
	require.Contains(t, a.body, "approval_mismatch")
	require.Equal(t, outbox.StateAwaitingApproval, b.get(t, "alpha", "big-charge").State)

	a = b.request(t, http.MethodPost, "/console/intents/alpha/big-charge/approve", url.Values{"args_sha256": {waiting.ArgsSHA256}, "note": {"called the customer"}}, operator)
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	require.Equal(t, "/console/intents/alpha/big-charge?done=approved", a.location)
	got := b.get(t, "alpha", "big-charge")
	require.Equal(t, outbox.StatePending, got.State)
	require.Equal(t, actor, *got.ApprovedBy)
	require.Equal(t, "called the customer", *got.ApprovalNote)

	a = b.request(t, http.MethodPost, "/console/intents/alpha/other-charge/deny", url.Values{"args_sha256": {denied.ArgsSHA256}, "note": {"too much"}}, operator)
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	got = b.get(t, "alpha", "other-charge")
	require.Equal(t, outbox.StateCancelled, got.State)
	require.Equal(t, actor, *got.DeniedBy)

	// Decided, it is not decided again.
	a = b.request(t, http.MethodPost, "/console/intents/alpha/big-charge/approve", url.Values{"args_sha256": {waiting.ArgsSHA256}}, operator)
	require.Equal(t, http.StatusConflict, a.status)
	require.Contains(t, a.body, "not_awaiting_approval")

	page := b.request(t, http.MethodGet, "/console/intents/alpha/big-charge", nil, operator)
	require.Contains(t, page.body, "approved")
	require.Contains(t, page.body, actor)
	require.Contains(t, page.body, "called the customer")
}

// Resolving an unknown intent records the console's actor and note; the
// intent page shows the args with personal fields redacted.
func TestResolve(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.unknown(t, "alpha", "lost-email", "email", map[string]any{"to": "ada@example.com", "subject": "Your refund", "template": "refund_v2"})
	operator := b.login(t, tokenOperator)

	page := b.request(t, http.MethodGet, "/console/intents/alpha/lost-email", nil, operator)
	require.Equal(t, http.StatusOK, page.status)
	require.NotContains(t, page.body, "ada@example.com")
	require.NotContains(t, page.body, "Your refund")
	require.Contains(t, page.body, "refund_v2")
	require.Contains(t, page.body, "[redacted]")
	require.Contains(t, page.body, "outcome_lost")
	require.NotContains(t, page.body, "Sent to the upstream", "an effect that sends its args as they are records none")

	// What an upstream received (the marker applied) is on the page: in
	// full for an operator, who resolves the call by it, redacted for a
	// reader.
	_, err := b.pool.Exec(context.Background(), `UPDATE `+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+
		` SET sent_args = '{"attempt": 1, "arguments": {"to": "ada@example.com", "body": "hi <!-- outbox:pk-1 -->"}}' WHERE key = 'lost-email'`)
	require.NoError(t, err)
	page = b.request(t, http.MethodGet, "/console/intents/alpha/lost-email", nil, operator)
	require.Contains(t, page.body, "Sent to the upstream (attempt 1)")
	require.Contains(t, page.body, "outbox:pk-1")
	require.Contains(t, page.body, "ada@example.com")
	page = b.request(t, http.MethodGet, "/console/intents/alpha/lost-email", nil, b.login(t, tokenReader))
	require.Contains(t, page.body, "Sent to the upstream (attempt 1)")
	require.NotContains(t, page.body, "outbox:pk-1")
	require.NotContains(t, page.body, "ada@example.com")

	queue := b.request(t, http.MethodGet, "/console/unknown", nil, operator)
	require.Contains(t, queue.body, "lost-email")
	require.NotContains(t, queue.body, "ada@example.com")
	require.Contains(t, queue.body, "May have reached the provider</dt><dd>yes")

	a := b.request(t, http.MethodPost, "/console/intents/alpha/lost-email/resolve", url.Values{"outcome": {"maybe"}, "note": {"?"}}, operator)
	require.Equal(t, http.StatusBadRequest, a.status)
	require.Contains(t, a.body, "<title>Error: invalid_args")
	a = b.request(t, http.MethodPost, "/console/intents/alpha/lost-email/resolve", url.Values{"outcome": {"succeeded"}, "note": {"in the mailbox, 10:42"}}, operator)
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	got := b.get(t, "alpha", "lost-email")
	require.Equal(t, outbox.StateSucceeded, got.State)
	require.Equal(t, access.ConsoleActor(tokens[0].Fingerprint()), *got.ResolvedBy)
	require.Equal(t, "in the mailbox, 10:42", *got.ResolutionNote)
	a = b.request(t, http.MethodPost, "/console/intents/alpha/lost-email/resolve", url.Values{"outcome": {"failed"}}, operator)
	require.Equal(t, http.StatusConflict, a.status)
	require.Contains(t, a.body, "not_unknown")
}

// A POST from another origin is refused before anything else, signed in or
// not; a same-origin one from a browser passes.
func TestCrossOrigin(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	waiting := b.enqueue(t, "alpha", "big-charge", "noop", map[string]any{"amount": 25000}, true)
	operator := b.login(t, tokenOperator)
	form := url.Values{"args_sha256": {waiting.ArgsSHA256}}

	a := b.request(t, http.MethodPost, "/console/intents/alpha/big-charge/approve", form, operator, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, a.status)
	require.Contains(t, a.body, "cross_origin_refused")
	a = b.request(t, http.MethodPost, "/console/intents/alpha/big-charge/approve", form, operator, "Sec-Fetch-Site", "same-site")
	require.Equal(t, http.StatusForbidden, a.status, "a sibling on another port is another origin")
	require.Contains(t, a.body, "<title>Error: cross_origin_refused")
	a = b.request(t, http.MethodPost, "/console/intents/alpha/big-charge/approve", form, operator, "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, a.status)
	require.Contains(t, a.body, "<title>Error: cross_origin_refused")
	a = b.request(t, http.MethodPost, "/console/login", url.Values{"token": {tokenOperator}}, nil, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, a.status, "no sign-in on another site's behalf")
	require.Contains(t, a.body, "<title>Error: cross_origin_refused")
	require.Equal(t, outbox.StateAwaitingApproval, b.get(t, "alpha", "big-charge").State)

	a = b.request(t, http.MethodPost, "/console/intents/alpha/big-charge/approve", form, operator, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	require.Equal(t, outbox.StatePending, b.get(t, "alpha", "big-charge").State)
}

// Bulk cancel: a preview count, a confirmation of that count, the pending
// intents of the filter only.
func TestBulkCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, key := range []string{"order-1", "order-2", "order-3"} {
		b.enqueue(t, "alpha", key, "noop", map[string]any{"key": key}, false)
	}
	b.enqueue(t, "alpha", "refund-1", "noop", map[string]any{"n": 1}, false)
	b.enqueue(t, "beta", "order-9", "noop", map[string]any{"n": 1}, false)
	operator := b.login(t, tokenOperator)

	list := b.request(t, http.MethodGet, "/console/intents?key=order-", nil, operator)
	require.Contains(t, list.body, "order-1")
	require.NotContains(t, list.body, "refund-1")
	require.Contains(t, list.body, "/console/bulk/cancel?key=order-")

	preview := b.request(t, http.MethodGet, "/console/bulk/cancel?key=order-&namespace=beta", nil, operator)
	require.Equal(t, http.StatusOK, preview.status)
	require.Contains(t, preview.body, "<strong>3</strong> pending intents match")

	a := b.request(t, http.MethodPost, "/console/bulk/cancel", url.Values{"key": {"order-"}, "count": {"3"}, "note": {"duplicate orders"}}, operator)
	require.Equal(t, http.StatusBadRequest, a.status, "not confirmed")
	require.Contains(t, a.body, "<title>Error: invalid_args")
	a = b.request(t, http.MethodPost, "/console/bulk/cancel", url.Values{"key": {"order-"}, "count": {"2"}, "confirm": {"yes"}, "note": {"x"}}, operator)
	require.Equal(t, http.StatusSeeOther, a.status, "more match than were confirmed: the preview again")
	require.Equal(t, outbox.StatePending, b.get(t, "alpha", "order-1").State)

	a = b.request(t, http.MethodPost, "/console/bulk/cancel", url.Values{"key": {"order-"}, "count": {"3"}, "confirm": {"yes"}, "note": {"duplicate orders"}}, operator)
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Contains(t, a.body, "Cancelled 3 intents")
	for _, key := range []string{"order-1", "order-2", "order-3"} {
		got := b.get(t, "alpha", key)
		require.Equal(t, outbox.StateCancelled, got.State)
		require.Equal(t, "duplicate orders", *got.ResolutionNote)
	}
	require.Equal(t, outbox.StatePending, b.get(t, "alpha", "refund-1").State)
	require.Equal(t, outbox.StatePending, b.get(t, "beta", "order-9").State)
}

// Without tokens and without a River UI user, loopback requests act as
// operator, as River UI's rule has it.
func TestOpenMode(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Config{})
	b.enqueue(t, "default", "local-key", "noop", map[string]any{"n": 1}, false)
	b.enqueue(t, "other", "other-key", "noop", map[string]any{"n": 1}, false)
	a := b.request(t, http.MethodGet, "/console/intents", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	require.Contains(t, a.body, "local-key")
	require.Contains(t, a.body, "other-key")
	require.Contains(t, a.body, "console:local")

	// A Host that is not loopback (a page that rebound its DNS name) is not.
	a = b.request(t, http.MethodGet, "/console/intents", nil, nil, "Host", "evil.example")
	require.Equal(t, http.StatusSeeOther, a.status)
}

func TestOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "alpha", "a1", "noop", map[string]any{"n": 1}, false)
	b.unknown(t, "alpha", "a2", "email", map[string]any{"n": 2})
	b.enqueue(t, "alpha", "a3", "noop", map[string]any{"n": 3}, true)
	operator := b.login(t, tokenOperator)

	a := b.request(t, http.MethodGet, "/console/", nil, operator)
	require.Equal(t, http.StatusOK, a.status)
	require.Contains(t, a.body, `data-live="unknown">1<`)
	require.Contains(t, a.body, `data-live="awaiting_approval">1<`)
	require.Contains(t, a.body, `data-live="pending">1<`)
	require.Contains(t, a.body, `href="/console/unknown"`)
	require.Contains(t, a.body, `href="/console/approvals"`)
	counts := b.request(t, http.MethodGet, "/console/counts.json", nil, operator)
	require.Contains(t, counts.body, `"unknown":1`)
}

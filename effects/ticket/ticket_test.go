package ticket_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/internal/sandbox"
)

const testToken = "zendesk-token-do-not-log"

func TestParseArgs(t *testing.T) {
	t.Parallel()
	a, err := ticket.ParseArgs(json.RawMessage(`{"subject": "Refund", "body": "Please refund order 1", "requester_email": "Ann <ann@example.com>", "priority": "high", "tags": ["refund", "vip"]}`))
	require.NoError(t, err)
	require.Equal(t, &ticket.Args{Subject: "Refund", Body: "Please refund order 1", RequesterEmail: "ann@example.com", Priority: "high", Tags: []string{"refund", "vip"}}, a)

	cases := []struct {
		name, args, field string
	}{
		{"NotAnObject", `null`, ""},
		{"UnknownField", `{"subject": "s", "body": "b", "assignee": 5}`, "assignee"},
		{"MissingSubject", `{"body": "b"}`, "subject"},
		{"SubjectLineBreak", `{"subject": "a\nb", "body": "b"}`, "subject"},
		{"MissingBody", `{"subject": "s"}`, "body"},
		{"EmptyBody", `{"subject": "s", "body": "  "}`, "body"},
		{"BadRequester", `{"subject": "s", "body": "b", "requester_email": "ann"}`, "requester_email"},
		{"BadPriority", `{"subject": "s", "body": "b", "priority": "asap"}`, "priority"},
		{"TagsNotArray", `{"subject": "s", "body": "b", "tags": "refund"}`, "tags"},
		{"TagWithSpace", `{"subject": "s", "body": "b", "tags": ["ok", "not ok"]}`, "tags[1]"},
		{"TooManyTags", `{"subject": "s", "body": "b", "tags": [` + strings.TrimSuffix(strings.Repeat(`"t",`, 51), ",") + `]}`, "tags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ticket.ParseArgs(json.RawMessage(tc.args))
			var argErr *effects.ArgError
			require.ErrorAs(t, err, &argErr)
			require.Equal(t, tc.field, argErr.Field, "error: %v", err)
		})
	}
}

type testBundle struct {
	effect  *ticket.Effect
	zendesk *sandbox.Zendesk
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	z, err := sandbox.NewZendesk(&sandbox.ZendeskConfig{Email: "agent@example.com", Token: testToken})
	require.NoError(t, err)
	t.Cleanup(z.Close)
	e, err := ticket.New(&ticket.Config{URL: z.URL(), Email: "agent@example.com", Token: testToken})
	require.NoError(t, err)
	return &testBundle{effect: e, zendesk: z}
}

const okArgs = `{"subject": "Refund", "body": "Please refund", "requester_email": "ann@example.com", "priority": "normal", "tags": ["refund"]}`

func execute(t *testing.T, e *ticket.Effect, key string, timeout time.Duration) (*ticket.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := e.Execute(ctx, &effects.Request{Args: json.RawMessage(okArgs), Attempt: 1, ProviderKey: key})
	if err != nil {
		require.NotContains(t, err.Error(), testToken)
		require.NotContains(t, err.Error(), "ann@example.com")
		return nil, err
	}
	var res ticket.Result
	require.NoError(t, json.Unmarshal(raw, &res))
	return &res, nil
}

func requireClass(t *testing.T, err error, class effects.Class, code string) {
	t.Helper()
	require.Error(t, err)
	gotClass, gotCode := effects.Classify(err)
	require.Equal(t, class, gotClass, "error: %v", err)
	if code != "" {
		require.Equal(t, code, gotCode, "error: %v", err)
	}
}

func TestExecuteAndLookup(t *testing.T) {
	t.Parallel()

	t.Run("CreatesAndFinds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, found, err := b.effect.Lookup(context.Background(), "obx_t1")
		require.NoError(t, err)
		require.False(t, found)

		res, err := execute(t, b.effect, "obx_t1", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, int64(1), res.TicketID)
		require.Equal(t, "new", res.Status)
		tickets := b.zendesk.Tickets()
		require.Len(t, tickets, 1)
		require.Equal(t, "obx_t1", tickets[0].ExternalID)
		require.Equal(t, "Refund", tickets[0].Subject)
		require.Equal(t, "Please refund", tickets[0].Description)
		require.Equal(t, "ann@example.com", tickets[0].Requester)
		require.Equal(t, []string{"refund"}, tickets[0].Tags)

		raw, found, err := b.effect.Lookup(context.Background(), "obx_t1")
		require.NoError(t, err)
		require.True(t, found)
		var looked ticket.Result
		require.NoError(t, json.Unmarshal(raw, &looked))
		require.Equal(t, *res, looked, "a look-up answers what the creation did")
	})

	t.Run("ThrottledAndUnavailableAreNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.zendesk.Misbehave(sandbox.Fault{Kind: sandbox.FaultTooManyRequests}, sandbox.Fault{Kind: sandbox.FaultUnavailable})
		_, err := execute(t, b.effect, "obx_t2", 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "rate_limited")
		require.Equal(t, time.Second, effects.RetryAfterOf(err), "Zendesk's Retry-After")
		_, err = execute(t, b.effect, "obx_t2", 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "unavailable")
		require.Equal(t, time.Second, effects.RetryAfterOf(err), "Zendesk's Retry-After")
		require.Equal(t, 0, b.zendesk.Effects())
	})

	t.Run("AfterCreatingIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.zendesk.Misbehave(sandbox.Fault{Kind: sandbox.FaultServerError}, sandbox.Fault{Kind: sandbox.FaultReset},
			sandbox.Fault{Kind: sandbox.FaultSlow, Delay: 5 * time.Second})
		_, err := execute(t, b.effect, "obx_t3", 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "provider_error")
		_, err = execute(t, b.effect, "obx_t4", 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "connection_lost")
		_, err = execute(t, b.effect, "obx_t5", 300*time.Millisecond)
		requireClass(t, err, effects.ClassAmbiguous, "timeout")
		require.Equal(t, 3, b.zendesk.Effects())
		for _, key := range []string{"obx_t3", "obx_t4", "obx_t5"} {
			_, found, err := b.effect.Lookup(context.Background(), key)
			require.NoError(t, err)
			require.True(t, found, key)
		}
	})

	t.Run("RefusalsArePermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.zendesk.Misbehave(sandbox.Fault{Kind: sandbox.FaultReject})
		_, err := execute(t, b.effect, "obx_t6", 5*time.Second)
		requireClass(t, err, effects.ClassPermanent, "http_422")
		require.Contains(t, err.Error(), "RecordInvalid")

		bad, err := ticket.New(&ticket.Config{URL: b.zendesk.URL(), Email: "agent@example.com", Token: "wrong-token"})
		require.NoError(t, err)
		_, err = execute(t, bad, "obx_t7", 5*time.Second)
		requireClass(t, err, effects.ClassPermanent, "http_401")
		require.NotContains(t, err.Error(), "wrong-token")
		_, _, err = bad.Lookup(context.Background(), "obx_t7")
		requireClass(t, err, effects.ClassPermanent, "http_401")
		require.Equal(t, 0, b.zendesk.Effects())
	})

	t.Run("ConnectionRefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.zendesk.Close()
		_, err := execute(t, b.effect, "obx_t8", 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "connection_failed")
		_, _, err = b.effect.Lookup(context.Background(), "obx_t8")
		requireClass(t, err, effects.ClassNotSent, "connection_failed")
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		config *ticket.Config
		want   string
	}{
		{nil, "URL, Email and Token must be set"},
		{&ticket.Config{URL: "https://x.zendesk.com", Email: "a@example.com"}, "URL, Email and Token must be set"},
		{&ticket.Config{URL: "ftp://x", Email: "a", Token: "t"}, "URL must be an http or https URL"},
	} {
		_, err := ticket.New(tc.config)
		require.ErrorContains(t, err, tc.want, "config %+v", tc.config)
	}
	e, err := ticket.New(&ticket.Config{URL: "https://x.zendesk.com/", Email: "a@example.com", Token: "t"})
	require.NoError(t, err)
	require.Equal(t, effects.GuaranteeReconcilable, e.Guarantee())
	var _ effects.Reconciler = e
}

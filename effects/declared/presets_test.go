package declared

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/testtools"
)

// The presets of presets.yaml, each run as declared against a real server
// (stripe-mock) or a loopback stand-in of its provider (standins_test.go).
// Every declaration points the preset at its server with a merge patch of
// request.url (and lookup.url), as an operator would override a field;
// LoopbackOnly makes a URL the patch missed fail the load instead of
// reaching the real provider.

// presetEffect declares the preset as effect e, overridden by patch (YAML
// members of the declaration, indented four spaces), with env as its
// environment.
func presetEffect(t *testing.T, preset, patch string, env map[string]string) *Effect {
	t.Helper()
	src := "effects:\n  e:\n    preset: " + preset + "\n" + patch
	effs, err := Parse("effects.yaml", []byte(src), &Config{
		LoopbackOnly: true,
		LookupEnvFunc: func(name string) (string, bool) {
			v, ok := env[name]
			return v, ok
		},
	})
	require.NoError(t, err, src)
	require.Len(t, effs, 1)
	return effs[0]
}

// execute validates args as the API would, then runs the effect once.
func execute(t *testing.T, e *Effect, providerKey, args string) (json.RawMessage, error) {
	t.Helper()
	require.NoError(t, e.ValidateArgs(json.RawMessage(args)), args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.Execute(ctx, &effects.Request{Args: json.RawMessage(args), Attempt: 1, IntentID: 1, ProviderKey: providerKey})
}

// lookupRequest asks the provider whether the effect of providerKey exists,
// as the reconcile step does.
func lookupRequest(t *testing.T, e *Effect, providerKey, args string, createdAt time.Time) (json.RawMessage, bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.LookupRequest(ctx, &effects.Request{Args: json.RawMessage(args), Attempt: 1, IntentID: 1, ProviderKey: providerKey}, createdAt)
}

func requireClass(t *testing.T, err error, class effects.Class, code string) {
	t.Helper()
	require.Error(t, err)
	gotClass, gotCode := effects.Classify(err)
	require.Equal(t, class, gotClass, err.Error())
	require.Equal(t, code, gotCode, err.Error())
}

// requireScrubbed checks that an error quoting the request shows none of
// the secrets, and shows that it was redacted.
func requireScrubbed(t *testing.T, err error, secrets ...string) {
	t.Helper()
	require.Error(t, err)
	for _, secret := range secrets {
		require.NotContains(t, err.Error(), secret)
	}
	require.Contains(t, err.Error(), "[redacted]", "the provider's error quoted the request, so something was redacted")
}

// TestStripeRefundPresetAgainstStripeMock sends the stripe.refund preset's
// requests to stripe-mock, which checks each against Stripe's OpenAPI
// specification and answers with its fixtures: the form the preset builds
// (with and without the optional arguments) is one Stripe accepts, and the
// result's pointers resolve in a real refund object.
//
// stripe-mock keeps no state, idempotency keys included: the same key sent
// twice gets two answers, so dedupe cannot be shown here.
// TestRefundAgainstIdempotentStandIn (effect_test.go) shows the replay of
// Stripe's documented Idempotency-Key behaviour instead.
func TestStripeRefundPresetAgainstStripeMock(t *testing.T) {
	t.Parallel()

	base := testtools.StartStripeMock(t)
	env := map[string]string{"STRIPE_KEY": "sk_test_123"}
	e := presetEffect(t, "stripe.refund", fmt.Sprintf("    request: {url: %q}\n", base+"/v1/refunds"), env)

	for i, args := range []string{
		`{"payment_intent": "pi_123"}`,
		`{"payment_intent": "pi_123", "amount": 500}`,
		`{"payment_intent": "pi_456", "amount": 1, "reason": "requested_by_customer"}`,
	} {
		res, err := execute(t, e, fmt.Sprintf("obx_stripe_mock_%d", i), args)
		require.NoError(t, err, "stripe-mock refused refund %d (%s)", i, args)
		var got struct {
			ID     string          `json:"id"`
			Status string          `json:"status"`
			Amount json.RawMessage `json:"amount"`
		}
		require.NoError(t, json.Unmarshal(res, &got))
		require.True(t, strings.HasPrefix(got.ID, "re_"), "result: %s", res)
		require.NotEmpty(t, got.Status, "result: %s", res)
		require.NotEmpty(t, got.Amount, "result: %s", res)
	}

	// The control: stripe-mock does refuse a parameter the specification
	// lacks, so the successes above mean something; its 400 is permanent.
	bad := presetEffect(t, "stripe.refund", fmt.Sprintf("    request: {url: %q, body: {no_such_param: x}}\n", base+"/v1/refunds"), env)
	_, err := execute(t, bad, "obx_stripe_mock_bad", `{"payment_intent": "pi_123"}`)
	requireClass(t, err, effects.ClassPermanent, "http_400")
	require.NotContains(t, err.Error(), "sk_test_123")
}

func TestResendEmailPreset(t *testing.T) {
	t.Parallel()

	const apiKey = "re_secret_key_42"
	const args = `{"from": "Acme <onboarding@acme.com>", "to": ["ada@example.com"], "subject": "Welcome", "text": "Hello"}`
	// setup declares the preset; patch adds members to the declaration,
	// and request members to its request.
	setup := func(t *testing.T, patch, request string) (*resendStandIn, *Effect) {
		t.Helper()
		s := newResendStandIn(t, apiKey)
		e := presetEffect(t, "resend.email", fmt.Sprintf("    request: {url: %q%s}\n", s.URL+"/emails", request)+patch, map[string]string{"RESEND_API_KEY": apiKey})
		return s, e
	}

	t.Run("SendsOnceAndReplaysTheFirstAnswer", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		first, err := execute(t, e, "obx_resend_1", args)
		require.NoError(t, err)
		require.JSONEq(t, `{"id": "49a3999c-0ce1-4ea6-ab68-afcd6dc2e701"}`, string(first))
		header, _, body := s.last()
		require.Equal(t, "obx_resend_1", header.Get("Idempotency-Key"))
		require.Equal(t, "Bearer "+apiKey, header.Get("Authorization"))
		require.JSONEq(t, `{"from": "Acme <onboarding@acme.com>", "to": ["ada@example.com"], "subject": "Welcome", "text": "Hello"}`, string(body),
			"absent optional arguments (html, reply_to) are not sent")

		again, err := execute(t, e, "obx_resend_1", args)
		require.NoError(t, err)
		require.JSONEq(t, string(first), string(again), "the first email's answer, replayed")
		require.Equal(t, 1, s.emailCount())
		require.Equal(t, 2, s.requestCount())
	})

	t.Run("ConcurrentRequestIsNotSent", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		entered, release := s.holdNext(t)
		type outcome struct {
			res json.RawMessage
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := e.Execute(ctx, &effects.Request{Args: json.RawMessage(args), ProviderKey: "obx_resend_2"})
			done <- outcome{res, err}
		}()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first request did not reach the stand-in")
		}
		// The same key while the first is in flight: 409
		// concurrent_idempotent_requests, which did nothing.
		_, err := execute(t, e, "obx_resend_2", args)
		requireClass(t, err, effects.ClassNotSent, "http_409")
		require.Contains(t, err.Error(), "concurrent_idempotent_requests")
		release()
		select {
		case o := <-done:
			require.NoError(t, o.err)
			require.JSONEq(t, `{"id": "49a3999c-0ce1-4ea6-ab68-afcd6dc2e701"}`, string(o.res))
		case <-time.After(10 * time.Second):
			t.Fatal("the first request did not finish")
		}
		// The retry the not_sent class leads to: the first answer.
		res, err := execute(t, e, "obx_resend_2", args)
		require.NoError(t, err)
		require.JSONEq(t, `{"id": "49a3999c-0ce1-4ea6-ab68-afcd6dc2e701"}`, string(res))
		require.Equal(t, 1, s.emailCount())
	})

	t.Run("SameKeyOtherPayloadIsPermanent", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		_, err := execute(t, e, "obx_resend_3", args)
		require.NoError(t, err)
		_, err = execute(t, e, "obx_resend_3", strings.Replace(args, "Welcome", "Welcome back", 1))
		requireClass(t, err, effects.ClassPermanent, "invalid_idempotent_request")
		require.Equal(t, 1, s.emailCount())
	})

	t.Run("AnswerLostAfterSendingIsAmbiguousThenReplayed", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		s.misbehave(fault{act: true, status: 500, body: `{"statusCode": 500, "name": "internal_server_error", "message": "An unexpected error occurred."}`})
		_, err := execute(t, e, "obx_resend_4", args)
		requireClass(t, err, effects.ClassAmbiguous, "http_500")
		res, err := execute(t, e, "obx_resend_4", args)
		require.NoError(t, err)
		require.JSONEq(t, `{"id": "49a3999c-0ce1-4ea6-ab68-afcd6dc2e701"}`, string(res))
		require.Equal(t, 1, s.emailCount(), "the retry with the same key did not send again")
	})

	t.Run("RateLimitedIsNotSentWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		s.misbehave(fault{status: 429, header: map[string]string{"Retry-After": "3"},
			body: `{"statusCode": 429, "name": "rate_limit_exceeded", "message": "Too many requests."}`})
		_, err := execute(t, e, "obx_resend_5", args)
		requireClass(t, err, effects.ClassNotSent, "http_429")
		require.Equal(t, 3*time.Second, effects.RetryAfterOf(err))
		require.Zero(t, s.emailCount())
	})

	t.Run("RefusalIsPermanentAndSecretNeverInAnError", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		s.misbehave(fault{status: 422, echo: true, body: `{"statusCode": 422, "name": "validation_error", "message": "Invalid request: ECHO"}`})
		_, err := execute(t, e, "obx_resend_6", args)
		requireClass(t, err, effects.ClassPermanent, "http_422")
		requireScrubbed(t, err, apiKey)
		require.Zero(t, s.emailCount())
	})

	// The control: without the Idempotency-Key (the preset weakened to
	// at_most_once, which may drop it), every request sends. The stand-in
	// dedupes by the key alone, so the counts above are the key's doing.
	t.Run("WithoutTheKeyEveryRequestSends", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "    guarantee: at_most_once\n    dedupe_window: null\n", ", headers: {Idempotency-Key: null}")
		for range 2 {
			_, err := execute(t, e, "obx_resend_7", args)
			require.NoError(t, err)
		}
		header, _, _ := s.last()
		require.Empty(t, header.Get("Idempotency-Key"))
		require.Equal(t, 2, s.emailCount())
	})
}

func TestPagerDutyEventPreset(t *testing.T) {
	t.Parallel()

	const routingKey = "R0UT1NGKEY0123456789ABCDEFGHIJKL"
	const args = `{"summary": "Disk full on db-1", "source": "db-1", "severity": "critical", "custom_details": {"free_bytes": 0}}`
	setup := func(t *testing.T) (*pagerDutyStandIn, *Effect) {
		t.Helper()
		s := newPagerDutyStandIn(t, routingKey)
		e := presetEffect(t, "pagerduty.event", fmt.Sprintf("    request: {url: %q}\n", s.URL+"/v2/enqueue"), map[string]string{"PAGERDUTY_ROUTING_KEY": routingKey})
		return s, e
	}

	t.Run("TriggersOnceAndMergesRepeats", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		first, err := execute(t, e, "obx_pd_1", args)
		require.NoError(t, err)
		require.JSONEq(t, `{"dedup_key": "obx_pd_1", "status": "success"}`, string(first))
		_, _, body := s.last()
		require.JSONEq(t, `{"routing_key": "`+routingKey+`", "event_action": "trigger", "dedup_key": "obx_pd_1",
			"payload": {"summary": "Disk full on db-1", "source": "db-1", "severity": "critical", "custom_details": {"free_bytes": 0}}}`, string(body))

		again, err := execute(t, e, "obx_pd_1", args)
		require.NoError(t, err)
		require.JSONEq(t, string(first), string(again))
		alerts, events := s.counts()
		require.Equal(t, 1, alerts, "the repeat merged into the open alert")
		require.Equal(t, 2, events)

		// Another key is another alert: the stand-in tells them apart.
		_, err = execute(t, e, "obx_pd_2", args)
		require.NoError(t, err)
		alerts, _ = s.counts()
		require.Equal(t, 2, alerts)
	})

	// Why the preset's window is an assumption: PagerDuty dedupes only
	// while the alert is open, and once resolved the same key opens a new
	// alert.
	t.Run("ResolvedAlertOpensAgain", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		_, err := execute(t, e, "obx_pd_3", args)
		require.NoError(t, err)
		s.resolve("obx_pd_3")
		_, err = execute(t, e, "obx_pd_3", args)
		require.NoError(t, err)
		alerts, _ := s.counts()
		require.Equal(t, 2, alerts)
	})

	t.Run("AnswerLostAfterAcceptingIsAmbiguousThenMerged", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		s.misbehave(fault{act: true, status: 502, body: `<html>Bad Gateway</html>`})
		_, err := execute(t, e, "obx_pd_4", args)
		requireClass(t, err, effects.ClassAmbiguous, "http_502")
		_, err = execute(t, e, "obx_pd_4", args)
		require.NoError(t, err)
		alerts, events := s.counts()
		require.Equal(t, 1, alerts)
		require.Equal(t, 2, events)
	})

	t.Run("ThrottledIsNotSentWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		// PagerDuty documents 429 for throttling; the Retry-After here
		// shows the effect honours one when it comes.
		s.misbehave(fault{status: 429, header: map[string]string{"Retry-After": "4"}, body: `{"status": "throttle event", "message": "Requests for this service are arriving too quickly. Please retry later."}`})
		_, err := execute(t, e, "obx_pd_5", args)
		requireClass(t, err, effects.ClassNotSent, "http_429")
		require.Equal(t, 4*time.Second, effects.RetryAfterOf(err))
		alerts, _ := s.counts()
		require.Zero(t, alerts)
	})

	t.Run("InvalidEventIsPermanentAndSecretNeverInAnError", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		s.misbehave(fault{status: 400, echo: true, body: `{"status": "invalid event", "message": "Event object is invalid", "errors": ["ECHO"]}`})
		_, err := execute(t, e, "obx_pd_6", args)
		requireClass(t, err, effects.ClassPermanent, "http_400")
		requireScrubbed(t, err, routingKey)
		alerts, _ := s.counts()
		require.Zero(t, alerts)
	})
}

func TestSlackMessagePreset(t *testing.T) {
	t.Parallel()

	const token = "xoxb-secret-token-42"
	const channel = "C0123456789"
	const args = `{"channel": "` + channel + `", "text": "Deploy finished"}`
	// setup declares the preset; patch adds members to the declaration,
	// and request members to its request.
	setup := func(t *testing.T, patch, request string) (*slackStandIn, *Effect) {
		t.Helper()
		s := newSlackStandIn(t, token, channel)
		e := presetEffect(t, "slack.message", fmt.Sprintf("    request: {url: %q%s}\n    lookup: {url: %q}\n",
			s.URL+"/api/chat.postMessage", request, s.URL+"/api/conversations.history?channel={args.channel}&include_all_metadata=true&limit=200")+patch,
			map[string]string{"SLACK_BOT_TOKEN": token})
		return s, e
	}

	t.Run("PostsOnceAndLookupFindsIt", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		createdAt := time.Now()
		res, err := execute(t, e, "obx_slack_1", args)
		require.NoError(t, err)
		require.JSONEq(t, `{"channel": "`+channel+`", "ts": "1700000000.000001"}`, string(res))
		_, _, body := s.last()
		require.JSONEq(t, `{"channel": "`+channel+`", "text": "Deploy finished",
			"metadata": {"event_type": "outbox_intent", "event_payload": {"provider_key": "obx_slack_1"}}}`, string(body))

		// The look-up finds the message among the channel's others (one
		// with another app's metadata), so a retry sends nothing.
		found, ok, err := lookupRequest(t, e, "obx_slack_1", args, createdAt)
		require.NoError(t, err)
		require.True(t, ok)
		require.JSONEq(t, `{"ts": "1700000000.000001"}`, string(found))
		_, ok, err = lookupRequest(t, e, "obx_slack_never_sent", args, createdAt)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, 1, s.postCount())
	})

	t.Run("RefusalWithOkFalseIsPermanent", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		_, err := execute(t, e, "obx_slack_2", `{"channel": "C0NOSUCH", "text": "hi"}`)
		requireClass(t, err, effects.ClassPermanent, "slack_refused")
		require.Contains(t, err.Error(), "channel_not_found")
		require.Zero(t, s.postCount())
	})

	t.Run("RatelimitedOkFalseIsNotSentWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		s.misbehave(fault{status: 200, header: map[string]string{"Retry-After": "2"}, body: `{"ok": false, "error": "ratelimited"}`})
		_, err := execute(t, e, "obx_slack_3", args)
		requireClass(t, err, effects.ClassNotSent, "rate_limited")
		require.Equal(t, 2*time.Second, effects.RetryAfterOf(err))
		require.Zero(t, s.postCount())
	})

	t.Run("TooManyRequestsIsNotSentWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		s.misbehave(fault{status: 429, header: map[string]string{"Retry-After": "30"}, body: `{"ok": false, "error": "ratelimited"}`})
		_, err := execute(t, e, "obx_slack_4", args)
		requireClass(t, err, effects.ClassNotSent, "http_429")
		require.Equal(t, 30*time.Second, effects.RetryAfterOf(err))
		require.Zero(t, s.postCount())
	})

	// internal_error says some of the operation may have succeeded: the
	// message may be posted, so the class is ambiguous (not permanent,
	// which would fail an intent whose message is in the channel), and
	// the look-up finds it.
	t.Run("InternalErrorAfterPostingIsAmbiguousThenFound", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		createdAt := time.Now()
		s.misbehave(fault{act: true, status: 200, body: `{"ok": false, "error": "internal_error"}`})
		_, err := execute(t, e, "obx_slack_5", args)
		requireClass(t, err, effects.ClassAmbiguous, "slack_error")
		found, ok, err := lookupRequest(t, e, "obx_slack_5", args, createdAt)
		require.NoError(t, err)
		require.True(t, ok, "the posted message is found, so it is not posted again")
		require.JSONEq(t, `{"ts": "1700000000.000001"}`, string(found))
		require.Equal(t, 1, s.postCount())

		// Slack's other errors of that kind are ambiguous too.
		for _, code := range []string{"fatal_error", "service_unavailable"} {
			s.misbehave(fault{status: 200, body: `{"ok": false, "error": "` + code + `"}`})
			_, err := execute(t, e, "obx_slack_5_"+code, args)
			requireClass(t, err, effects.ClassAmbiguous, "slack_error")
		}
	})

	t.Run("ServerErrorIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		s.misbehave(fault{status: 500, body: `upstream error`})
		_, err := execute(t, e, "obx_slack_6", args)
		requireClass(t, err, effects.ClassAmbiguous, "http_500")
		_, ok, err := lookupRequest(t, e, "obx_slack_6", args, time.Now())
		require.NoError(t, err)
		require.False(t, ok, "not posted: the worker may send again with the same key")
		require.Zero(t, s.postCount())
	})

	// A look-up Slack refuses (ok: false, HTTP 200) is a failure, never
	// "not found", which would post a second message.
	t.Run("RefusedLookupIsNotNotFound", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		_, err := execute(t, e, "obx_slack_7", args)
		require.NoError(t, err)
		s.misbehave(fault{status: 200, body: `{"ok": false, "error": "missing_scope", "needed": "channels:history"}`})
		_, ok, err := lookupRequest(t, e, "obx_slack_7", args, time.Now())
		require.Error(t, err)
		require.Contains(t, err.Error(), "lookup_failed")
		require.False(t, ok)
	})

	t.Run("SecretNeverInAnError", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t, "", "")
		s.misbehave(fault{status: 200, echo: true, body: `{"ok": false, "error": "invalid_auth", "detail": "ECHO"}`})
		_, err := execute(t, e, "obx_slack_8", args)
		requireClass(t, err, effects.ClassPermanent, "slack_refused")
		requireScrubbed(t, err, token)
	})

	// Why the preset takes no thread_ts: conversations.history lists
	// top-level messages only, so a thread reply is never found, and a
	// retry after an ambiguous answer would post it again. An override
	// that adds it back shows the look-up missing a reply it posted.
	t.Run("ThreadReplyIsNotFoundByTheLookup", func(t *testing.T) {
		t.Parallel()
		_, preset := setup(t, "", "")
		require.Error(t, preset.ValidateArgs(json.RawMessage(`{"channel": "`+channel+`", "text": "hi", "thread_ts": "1699999999.000001"}`)))

		_, e := setup(t, "    args: {properties: {thread_ts: {type: string}}}\n", `, body: {thread_ts: "{args.thread_ts}"}`)
		threaded := `{"channel": "` + channel + `", "text": "in thread", "thread_ts": "1699999999.000001"}`
		_, err := execute(t, e, "obx_slack_9", threaded)
		require.NoError(t, err)
		_, ok, err := lookupRequest(t, e, "obx_slack_9", threaded, time.Now())
		require.NoError(t, err)
		require.False(t, ok, "the reply was posted, yet the look-up cannot see it")
	})
}

func TestGitHubIssuePreset(t *testing.T) {
	t.Parallel()

	const token = "ghp_secret_token_42"
	const args = `{"owner": "acme", "repo": "api", "title": "Flaky test", "body": "TestX fails one run in ten.", "labels": ["bug"]}`
	setup := func(t *testing.T) (*githubStandIn, *Effect) {
		t.Helper()
		s := newGitHubStandIn(t, token, "acme", "api")
		e := presetEffect(t, "github.issue", fmt.Sprintf("    request: {url: %q}\n    lookup: {url: %q}\n",
			s.URL+"/repos/{args.owner}/{args.repo}/issues",
			s.URL+"/repos/{args.owner}/{args.repo}/issues?state=all&sort=created&direction=desc&per_page=100&since={intent.created_at}"),
			map[string]string{"GITHUB_TOKEN": token})
		return s, e
	}
	// limited is a rate-limited answer: status, headers and message.
	limited := func(status int, remaining, retryAfter, msg string) fault {
		h := map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": remaining, "X-RateLimit-Reset": "1900000000"}
		if retryAfter != "" {
			h["Retry-After"] = retryAfter
		}
		return fault{status: status, header: h, body: fmt.Sprintf(`{"message": %q, "documentation_url": "https://docs.github.com/rest"}`, msg)}
	}

	t.Run("OpensOnceAndLookupFindsIt", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		createdAt := time.Now()
		res, err := execute(t, e, "obx_gh_1", args)
		require.NoError(t, err)
		require.JSONEq(t, `{"id": 1002, "number": 2, "url": "https://github.com/acme/api/issues/2"}`, string(res))
		header, _, body := s.last()
		require.Equal(t, "application/vnd.github+json", header.Get("Accept"))
		require.JSONEq(t, `{"title": "Flaky test", "body": "TestX fails one run in ten.\n\n<!-- outbox:obx_gh_1 -->", "labels": ["bug"]}`, string(body))

		found, ok, err := lookupRequest(t, e, "obx_gh_1", args, createdAt)
		require.NoError(t, err)
		require.True(t, ok)
		require.JSONEq(t, string(res), string(found))
		// Closed since: still found (state=all).
		s.closeIssue(2)
		_, ok, err = lookupRequest(t, e, "obx_gh_1", args, createdAt)
		require.NoError(t, err)
		require.True(t, ok, "a closed issue is still the effect")
		_, ok, err = lookupRequest(t, e, "obx_gh_never_sent", args, createdAt)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, 1, s.createdCount())
	})

	// The marker is appended to body, so body is required; it may be
	// empty.
	t.Run("EmptyBodyStillCarriesTheMarker", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		noBody := `{"owner": "acme", "repo": "api", "title": "No text"}`
		require.Error(t, e.ValidateArgs(json.RawMessage(noBody)))
		// Were it let through, the request could not carry the marker: it
		// is refused before anything is sent.
		_, err := e.Execute(context.Background(), &effects.Request{Args: json.RawMessage(noBody), ProviderKey: "obx_gh_2"})
		requireClass(t, err, effects.ClassPermanent, "invalid_args")
		require.Zero(t, s.requestCount())
		createdAt := time.Now()
		empty := `{"owner": "acme", "repo": "api", "title": "No text", "body": ""}`
		_, err = execute(t, e, "obx_gh_2", empty)
		require.NoError(t, err)
		_, _, body := s.last()
		require.JSONEq(t, `{"title": "No text", "body": "\n\n<!-- outbox:obx_gh_2 -->"}`, string(body))
		_, ok, err := lookupRequest(t, e, "obx_gh_2", empty, createdAt)
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("ServerErrorAfterCreatingIsAmbiguousThenFound", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		createdAt := time.Now()
		s.misbehave(fault{act: true, status: 502, body: `{"message": "Server Error"}`})
		_, err := execute(t, e, "obx_gh_3", args)
		requireClass(t, err, effects.ClassAmbiguous, "http_502")
		found, ok, err := lookupRequest(t, e, "obx_gh_3", args, createdAt)
		require.NoError(t, err)
		require.True(t, ok)
		require.JSONEq(t, `{"id": 1002, "number": 2, "url": "https://github.com/acme/api/issues/2"}`, string(found))
		require.Equal(t, 1, s.createdCount())
	})

	t.Run("RateLimitsAreNotSent", func(t *testing.T) {
		t.Parallel()
		for name, tt := range map[string]struct {
			fault      fault
			retryAfter time.Duration
		}{
			"Primary403":                {limited(403, "0", "", "API rate limit exceeded for user ID 1."), 0},
			"Primary429":                {limited(429, "0", "", "API rate limit exceeded for user ID 1."), 0},
			"SecondaryWithRetryAfter":   {limited(403, "4990", "60", "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."), time.Minute},
			"SecondaryWithoutHeader":    {limited(403, "4990", "", "You have exceeded a secondary rate limit and have been temporarily blocked from content creation."), 0},
			"TooManyRequestsRetryAfter": {limited(429, "4990", "5", "Too many requests."), 5 * time.Second},
		} {
			s, e := setup(t)
			s.misbehave(tt.fault)
			_, err := execute(t, e, "obx_gh_4", args)
			requireClass(t, err, effects.ClassNotSent, "rate_limited")
			require.Equal(t, tt.retryAfter, effects.RetryAfterOf(err), name)
			require.Zero(t, s.createdCount(), name)
		}
	})

	// A 403 that is no rate limit (remaining not 0, no retry-after, no
	// such message) is a refusal: permanent.
	t.Run("ForbiddenIsPermanent", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		s.misbehave(limited(403, "4999", "", "Resource not accessible by integration"))
		_, err := execute(t, e, "obx_gh_5", args)
		requireClass(t, err, effects.ClassPermanent, "http_403")
	})

	t.Run("UnknownRepositoryIsPermanent", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		_, err := execute(t, e, "obx_gh_6", strings.Replace(args, `"api"`, `"nosuch"`, 1))
		requireClass(t, err, effects.ClassPermanent, "http_404")
		require.Zero(t, s.createdCount())
	})

	t.Run("SecretNeverInAnError", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		s.misbehave(fault{status: 401, echo: true, body: `{"message": "Bad credentials: ECHO"}`})
		_, err := execute(t, e, "obx_gh_7", args)
		requireClass(t, err, effects.ClassPermanent, "http_401")
		requireScrubbed(t, err, token)
	})
}

func TestTwilioSMSPreset(t *testing.T) {
	t.Parallel()

	const sid, authToken = "AC0123456789abcdef0123456789abcdef", "twilio_auth_token_42"
	basic := base64.StdEncoding.EncodeToString([]byte(sid + ":" + authToken))
	const args = `{"to": "+15551234567", "from": "+15557654321", "body": "Your code is 123456"}`
	setup := func(t *testing.T) (*twilioStandIn, *Effect) {
		t.Helper()
		s := newTwilioStandIn(t, sid, authToken)
		e := presetEffect(t, "twilio.sms", fmt.Sprintf("    request: {url: %q}\n", s.URL+"/2010-04-01/Accounts/{env.TWILIO_ACCOUNT_SID}/Messages.json"),
			map[string]string{"TWILIO_ACCOUNT_SID": sid, "TWILIO_BASIC_AUTH": basic})
		return s, e
	}

	// Twilio takes no key: a repeat sends a second SMS. That is why the
	// preset is at_most_once, and why the worker never repeats a send
	// that may have reached Twilio.
	t.Run("SendsOnceAndARepeatSendsAgain", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		require.Equal(t, effects.GuaranteeAtMostOnce, e.Guarantee())
		res, err := execute(t, e, "obx_sms_1", args)
		require.NoError(t, err)
		require.JSONEq(t, `{"id": "SM00000000000000000000000000000001", "status": "queued"}`, string(res))
		_, _, body := s.last()
		require.Equal(t, "Body=Your+code+is+123456&From=%2B15557654321&To=%2B15551234567", sortedForm(t, body))
		require.Equal(t, 1, s.messageCount())

		_, err = execute(t, e, "obx_sms_1", args)
		require.NoError(t, err)
		require.Equal(t, 2, s.messageCount(), "no dedupe")
	})

	// For an at-most-once effect a 503 is not trusted to mean "not
	// processed": no key makes a wrong guess harmless.
	t.Run("UnavailableAndServerErrorAreAmbiguous", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		s.misbehave(fault{status: 503, body: `{"code": 20503, "message": "Service Unavailable", "status": 503}`},
			fault{act: true, status: 500, body: `{"code": 20500, "message": "Internal Server Error", "status": 500}`})
		_, err := execute(t, e, "obx_sms_2", args)
		requireClass(t, err, effects.ClassAmbiguous, "http_503")
		_, err = execute(t, e, "obx_sms_3", args)
		requireClass(t, err, effects.ClassAmbiguous, "http_500")
		require.Equal(t, 1, s.messageCount(), "the 500 came after sending")
	})

	t.Run("TooManyRequestsIsNotSentWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		// Twilio answers 429 (error 20429) when a queue overflows,
		// before creating the message; the Retry-After shows the effect
		// honours one when it comes.
		s.misbehave(fault{status: 429, header: map[string]string{"Retry-After": "1"}, body: `{"code": 20429, "message": "Too Many Requests", "status": 429}`})
		_, err := execute(t, e, "obx_sms_4", args)
		requireClass(t, err, effects.ClassNotSent, "http_429")
		require.Equal(t, time.Second, effects.RetryAfterOf(err))
		require.Zero(t, s.messageCount())
	})

	t.Run("RefusalIsPermanent", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		_, err := execute(t, e, "obx_sms_5", `{"to": "+15005550009", "from": "+15557654321", "body": "hi"}`)
		requireClass(t, err, effects.ClassPermanent, "http_400")
		require.Contains(t, err.Error(), "21610")
		require.Zero(t, s.messageCount())
	})

	t.Run("SecretNeverInAnError", func(t *testing.T) {
		t.Parallel()
		s, e := setup(t)
		s.misbehave(fault{status: 401, echo: true, body: `{"code": 20003, "message": "Authenticate: ECHO", "status": 401}`})
		_, err := execute(t, e, "obx_sms_6", args)
		requireClass(t, err, effects.ClassPermanent, "http_401")
		// The account SID is in the URL path and the credentials in the
		// Authorization header; the error shows the URL's template.
		requireScrubbed(t, err, sid, basic)
		require.Contains(t, err.Error(), "{env.TWILIO_ACCOUNT_SID}")
	})
}

// sortedForm re-encodes a form body with its keys sorted.
func sortedForm(t *testing.T, body []byte) string {
	t.Helper()
	v, err := url.ParseQuery(string(body))
	require.NoError(t, err)
	return v.Encode()
}

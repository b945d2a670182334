package webhook_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/sandbox"
)

// The test vector published with the Standard Webhooks reference libraries
// (Svix's libraries test the same one): secret, message id, timestamp and
// body, and the signature every conforming receiver accepts.
func TestSignStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	key, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		webhook.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`)))
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]string{
		"":                                 "secret must start with whsec_",
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw": "secret must start with whsec_",
		"whsec_":                           "secret must be whsec_ followed by base64",
		"whsec_not base64!":                "secret must be whsec_ followed by base64",
	} {
		_, err := webhook.ParseSecret(s)
		require.EqualError(t, err, want, s)
	}
}

func TestParseEndpoints(t *testing.T) {
	t.Parallel()
	eps, err := webhook.ParseEndpoints("orders=https://example.com/hooks/orders?token=abc;dedupe, audit=http://127.0.0.1:9000/a")
	require.NoError(t, err)
	require.Equal(t, []webhook.Endpoint{
		{Name: "orders", URL: "https://example.com/hooks/orders?token=abc", Dedupe: true},
		{Name: "audit", URL: "http://127.0.0.1:9000/a"},
	}, eps)

	for s, want := range map[string]string{
		"":                             "no endpoint",
		"orders":                       "entry 1: must be name=url[;dedupe]",
		"=https://example.com":         "entry 1: must be name=url[;dedupe]",
		"bad name=https://example.com": "entry 1: must be name=url[;dedupe]",
		"a=ftp://example.com":          "entry 1 (a): URL must be an absolute http or https URL",
		"a=/relative":                  "entry 1 (a): URL must be an absolute http or https URL",
		"a=https://example.com,a=https://example.org": "entry 2: endpoint a named twice",
	} {
		_, err := webhook.ParseEndpoints(s)
		require.ErrorContains(t, err, want, s)
	}
	_, err = webhook.ParseEndpoints("a=notaurl?token=SECRET123")
	require.ErrorContains(t, err, "URL must be an absolute http or https URL")
	require.NotContains(t, err.Error(), "SECRET123", "errors never quote a URL")
}

func newEffect(t *testing.T, eps []webhook.Endpoint, secret string) *webhook.Effect {
	t.Helper()
	e, err := webhook.New(&webhook.Config{Endpoints: eps, Secret: secret})
	require.NoError(t, err)
	return e
}

func TestGuarantee(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	dedupe := webhook.Endpoint{Name: "a", URL: "https://example.com/a", Dedupe: true}
	plain := webhook.Endpoint{Name: "b", URL: "https://example.com/b"}
	require.Equal(t, effects.GuaranteeDeduplicated, newEffect(t, []webhook.Endpoint{dedupe}, secret).Guarantee())
	require.Equal(t, effects.GuaranteeAtMostOnce, newEffect(t, []webhook.Endpoint{plain}, secret).Guarantee())
	require.Equal(t, effects.GuaranteeAtMostOnce, newEffect(t, []webhook.Endpoint{dedupe, plain}, secret).Guarantee(),
		"a mixed configuration is as weak as its weakest endpoint")
	_, err := webhook.New(&webhook.Config{Endpoints: []webhook.Endpoint{dedupe}, Secret: "nope"})
	require.ErrorContains(t, err, "secret must start with "+webhook.SecretPrefix)
	_, err = webhook.New(&webhook.Config{Secret: secret})
	require.ErrorContains(t, err, "Endpoints must be set")
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	e := newEffect(t, []webhook.Endpoint{{Name: "orders", URL: "https://example.com/o"}, {Name: "audit", URL: "https://example.com/a"}},
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	a, err := e.ParseArgs(json.RawMessage(`{"endpoint": "orders", "payload": {"b": [1, 2], "a": "x"}}`))
	require.NoError(t, err)
	require.Equal(t, "orders", a.Endpoint.Name)
	require.Equal(t, `{"b":[1,2],"a":"x"}`, string(a.Payload))

	cases := []struct {
		name, args, field string
	}{
		{"NotAnObject", `[]`, ""},
		{"UnknownField", `{"endpoint": "orders", "payload": {}, "url": "https://evil.example"}`, "url"},
		{"MissingEndpoint", `{"payload": {}}`, "endpoint"},
		{"UnknownEndpoint", `{"endpoint": "billing", "payload": {}}`, "endpoint"},
		{"EndpointNotString", `{"endpoint": 1, "payload": {}}`, "endpoint"},
		{"MissingPayload", `{"endpoint": "orders"}`, "payload"},
		{"NullPayload", `{"endpoint": "orders", "payload": null}`, "payload"},
		{"ArrayPayload", `{"endpoint": "orders", "payload": [1]}`, "payload"},
		{"HugePayload", `{"endpoint": "orders", "payload": {"x": "` + strings.Repeat("y", 300<<10) + `"}}`, "payload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := e.ValidateArgs(json.RawMessage(tc.args))
			var argErr *effects.ArgError
			require.ErrorAs(t, err, &argErr)
			require.Equal(t, tc.field, argErr.Field, "error: %v", err)
		})
	}
	err = e.ValidateArgs(json.RawMessage(`{"endpoint": "billing", "payload": {}}`))
	require.Contains(t, err.Error(), "audit, orders", "the error says which endpoints there are")
}

type testBundle struct {
	effect   *webhook.Effect
	receiver *sandbox.WebhookReceiver
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	r, err := sandbox.NewWebhookReceiver(nil)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	e := newEffect(t, []webhook.Endpoint{
		{Name: "orders", URL: r.EndpointURL("orders", true) + "?token=tok_SECRET", Dedupe: true},
		{Name: "audit", URL: r.EndpointURL("audit", false) + "?token=tok_SECRET"},
	}, r.Secret())
	return &testBundle{effect: e, receiver: r}
}

func execute(t *testing.T, e *webhook.Effect, key, endpoint string, timeout time.Duration) (*webhook.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := `{"endpoint": "` + endpoint + `", "payload": {"type": "order.paid", "data": {"order": 1234}}}`
	raw, err := e.Execute(ctx, &effects.Request{Args: json.RawMessage(args), Attempt: 1, ProviderKey: key})
	if err != nil {
		require.NotContains(t, err.Error(), "tok_SECRET", "errors never quote the URL")
		return nil, err
	}
	var res webhook.Result
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

func TestExecute(t *testing.T) {
	t.Parallel()

	t.Run("DeliversSigned", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := execute(t, b.effect, "obx_w1", "orders", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, webhook.Result{Endpoint: "orders", Status: 200}, *res)
		// The receiver dedupes on webhook-id: a retry is no second delivery.
		_, err = execute(t, b.effect, "obx_w1", "orders", 5*time.Second)
		require.NoError(t, err)
		d := b.receiver.Deliveries()
		require.Len(t, d, 1)
		require.Equal(t, "obx_w1", d[0].ID)
		require.Equal(t, "orders", d[0].Endpoint)
		require.JSONEq(t, `{"type": "order.paid", "data": {"order": 1234}}`, string(d[0].Body))
		require.Equal(t, 0, b.receiver.Rejected())
		require.Equal(t, 2, b.receiver.Requests())
	})

	t.Run("WrongSecretIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := newEffect(t, []webhook.Endpoint{{Name: "audit", URL: b.receiver.EndpointURL("audit", false)}}, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		_, err := execute(t, e, "obx_w2", "audit", 5*time.Second)
		requireClass(t, err, effects.ClassPermanent, "http_401")
		require.Equal(t, 1, b.receiver.Rejected())
		require.Equal(t, 0, b.receiver.Effects())
	})

	t.Run("BeforeFaultsAreNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.receiver.Misbehave(sandbox.Fault{Kind: sandbox.FaultTooManyRequests}, sandbox.Fault{Kind: sandbox.FaultUnavailable}, sandbox.Fault{Kind: sandbox.FaultReject})
		_, err := execute(t, b.effect, "obx_w3", "audit", 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "rate_limited")
		require.Equal(t, time.Second, effects.RetryAfterOf(err), "the receiver's Retry-After")
		_, err = execute(t, b.effect, "obx_w3", "audit", 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "unavailable")
		_, err = execute(t, b.effect, "obx_w3", "audit", 5*time.Second)
		requireClass(t, err, effects.ClassPermanent, "http_400")
		require.Equal(t, 0, b.receiver.Effects())
	})

	t.Run("AfterFaultsAreAmbiguous", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.receiver.Misbehave(sandbox.Fault{Kind: sandbox.FaultServerError}, sandbox.Fault{Kind: sandbox.FaultReset},
			sandbox.Fault{Kind: sandbox.FaultSlow, Delay: 5 * time.Second})
		_, err := execute(t, b.effect, "obx_w4", "audit", 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "provider_error")
		_, err = execute(t, b.effect, "obx_w5", "audit", 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "connection_lost")
		_, err = execute(t, b.effect, "obx_w6", "audit", 300*time.Millisecond)
		requireClass(t, err, effects.ClassAmbiguous, "timeout")
		// Each was delivered once: net/http did not resend any by itself.
		require.Equal(t, 3, b.receiver.Effects())
	})

	t.Run("ConnectionRefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.receiver.Close()
		_, err := execute(t, b.effect, "obx_w7", "audit", 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "connection_failed")
	})
}

package charge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/internal/testtools"
)

// Every request the charge effect sends is accepted by stripe-mock, which
// validates requests against Stripe's OpenAPI specification: with and
// without the optional arguments, through stripe-go as the effect uses it.
func TestStripeMockAcceptsEveryCharge(t *testing.T) {
	t.Parallel()
	url := testtools.StartStripeMock(t)
	effect, err := charge.New(&charge.Config{APIKey: "sk_test_123", URL: url})
	require.NoError(t, err)

	argsList := []string{
		`{"customer": "cus_123", "amount": 1999, "currency": "usd"}`,
		`{"customer": "cus_123", "amount": 50, "currency": "EUR", "payment_method": "pm_card_visa"}`,
		`{"customer": "cus_456", "amount": 1.2e3, "currency": "jpy", "description": "Order #1234 — 2 items"}`,
		`{"customer": "cus_789", "amount": 99999999, "currency": "gbp", "payment_method": "pm_card_visa", "description": "everything"}`,
	}
	// The control: stripe-mock does refuse what the specification does not
	// have, so the successes below mean something.
	control, err := http.NewRequest(http.MethodPost, url+"/v1/payment_intents",
		strings.NewReader("amount=1&currency=usd&confirm=true&no_such_param=1"))
	require.NoError(t, err)
	control.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	control.SetBasicAuth("sk_test_123", "")
	resp, err := http.DefaultClient.Do(control)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	for i, args := range argsList {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		raw, err := effect.Execute(ctx, request(fmt.Sprintf("obx_mock_%d", i), args))
		cancel()
		require.NoError(t, err, "stripe-mock refused charge %d (%s)", i, args)
		var res charge.Result
		require.NoError(t, json.Unmarshal(raw, &res))
		require.True(t, strings.HasPrefix(res.PaymentIntent, "pi_"), "result: %s", raw)
	}
}

// A charge through stripe-go is a client span of the attempt's trace, named
// by Stripe's path, with neither the provider key (Stripe's
// Idempotency-Key), the API key nor the arguments in it.
func TestStripeMockClientSpan(t *testing.T) {
	t.Parallel()
	url := testtools.StartStripeMock(t)
	effect, err := charge.New(&charge.Config{APIKey: "sk_test_4eC39HqLyjWDarjtT1zdp7dc", URL: url})
	require.NoError(t, err)

	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	ctx, attempt := provider.Tracer("test").Start(t.Context(), "attempt charge")
	_, err = effect.Execute(ctx, request("obx_span_key_5521", `{"customer": "cus_span_private", "amount": 1999, "currency": "usd"}`))
	require.NoError(t, err)
	attempt.End()

	var client sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		for _, kv := range s.Attributes() {
			for _, secret := range []string{"obx_span_key_5521", "sk_test_4eC39HqLyjWDarjtT1zdp7dc", "cus_span_private"} {
				require.NotContains(t, kv.Value.String(), secret, "span %q attribute %s", s.Name(), kv.Key)
			}
		}
		if s.SpanKind() == trace.SpanKindClient {
			client = s
		}
	}
	require.NotNil(t, client, "stripe-go's request is a client span")
	require.Equal(t, "POST /v1/payment_intents", client.Name())
	require.Equal(t, attempt.SpanContext().SpanID(), client.Parent().SpanID())
}

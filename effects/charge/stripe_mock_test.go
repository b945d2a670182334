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

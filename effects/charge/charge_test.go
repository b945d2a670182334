package charge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/internal/sandbox"
)

const testAPIKey = "sk_test_secret_do_not_log_4242"

func TestParseArgs(t *testing.T) {
	t.Parallel()

	valid := `{"customer": "cus_1", "amount": 1999, "currency": "USD", "payment_method": "pm_card_visa", "description": "order 1"}`
	a, err := charge.ParseArgs(json.RawMessage(valid))
	require.NoError(t, err)
	require.Equal(t, &charge.Args{Amount: 1999, Currency: "usd", Customer: "cus_1", Description: "order 1", PaymentMethod: "pm_card_visa"}, a)

	// 1999.0 and 1.999e3 are 1999, as jsonb has it.
	for _, amount := range []string{"1999.0", "1.999e3"} {
		a, err := charge.ParseArgs(json.RawMessage(`{"customer": "cus_1", "currency": "eur", "amount": ` + amount + `}`))
		require.NoError(t, err, amount)
		require.Equal(t, int64(1999), a.Amount)
	}

	cases := []struct {
		name, args, field string
	}{
		{"NotAnObject", `[1]`, ""},
		{"NotJSON", `{`, ""},
		{"UnknownField", `{"customer": "cus_1", "amount": 1, "currency": "usd", "amonut": 2}`, "amonut"},
		{"MissingAmount", `{"customer": "cus_1", "currency": "usd"}`, "amount"},
		{"NullAmount", `{"customer": "cus_1", "currency": "usd", "amount": null}`, "amount"},
		{"ZeroAmount", `{"customer": "cus_1", "currency": "usd", "amount": 0}`, "amount"},
		{"NegativeAmount", `{"customer": "cus_1", "currency": "usd", "amount": -5}`, "amount"},
		{"FractionalAmount", `{"customer": "cus_1", "currency": "usd", "amount": 19.99}`, "amount"},
		{"StringAmount", `{"customer": "cus_1", "currency": "usd", "amount": "1999"}`, "amount"},
		{"HugeAmount", `{"customer": "cus_1", "currency": "usd", "amount": 1e300}`, "amount"},
		{"MissingCurrency", `{"customer": "cus_1", "amount": 1}`, "currency"},
		{"BadCurrency", `{"customer": "cus_1", "amount": 1, "currency": "dollars"}`, "currency"},
		{"NumberCurrency", `{"customer": "cus_1", "amount": 1, "currency": 840}`, "currency"},
		{"MissingCustomer", `{"amount": 1, "currency": "usd"}`, "customer"},
		{"EmptyCustomer", `{"customer": " ", "amount": 1, "currency": "usd"}`, "customer"},
		{"EmptyPaymentMethod", `{"customer": "cus_1", "amount": 1, "currency": "usd", "payment_method": ""}`, "payment_method"},
		{"LongDescription", `{"customer": "cus_1", "amount": 1, "currency": "usd", "description": "` + string(bytes.Repeat([]byte("x"), 1001)) + `"}`, "description"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := charge.ParseArgs(json.RawMessage(tc.args))
			var argErr *effects.ArgError
			require.ErrorAs(t, err, &argErr)
			require.Equal(t, tc.field, argErr.Field, "error: %v", err)
			require.NotEmpty(t, argErr.Message)
		})
	}
}

type testBundle struct {
	effect *charge.Effect
	logs   *bytes.Buffer
	stripe *sandbox.Stripe
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	stripe, err := sandbox.NewStripe(&sandbox.StripeConfig{APIKey: testAPIKey})
	require.NoError(t, err)
	t.Cleanup(stripe.Close)
	var logs bytes.Buffer
	effect, err := charge.New(&charge.Config{
		APIKey: testAPIKey,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		URL:    stripe.URL(),
	})
	require.NoError(t, err)
	return &testBundle{effect: effect, logs: &logs, stripe: stripe}
}

func request(key, args string) *effects.Request {
	return &effects.Request{Args: json.RawMessage(args), Attempt: 1, IntentID: 1, Namespace: "default", ProviderKey: key}
}

const okArgs = `{"customer": "cus_1", "amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}`

func execute(t *testing.T, e *charge.Effect, req *effects.Request, timeout time.Duration) (*charge.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := e.Execute(ctx, req)
	if err != nil {
		require.NotContains(t, err.Error(), testAPIKey, "an effect error must not carry the API key")
		return nil, err
	}
	var res charge.Result
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

	t.Run("ChargesOnceAndReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := execute(t, b.effect, request("obx_a", okArgs), 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "succeeded", first.Status)
		require.Equal(t, int64(1999), first.Amount)
		require.Equal(t, "usd", first.Currency)
		require.False(t, first.Replayed)

		second, err := execute(t, b.effect, request("obx_a", okArgs), 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, first.PaymentIntent, second.PaymentIntent)
		require.True(t, second.Replayed)
		require.Equal(t, 1, b.stripe.Effects())
		require.Equal(t, 2, b.stripe.Requests())
		require.Equal(t, []string{first.PaymentIntent}, b.stripe.Charges())
	})

	t.Run("DeclinedIsPermanentWithDeclineCode", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		args := `{"customer": "cus_1", "amount": 500, "currency": "usd", "payment_method": "pm_card_chargeDeclined"}`
		_, err := execute(t, b.effect, request("obx_d", args), 5*time.Second)
		requireClass(t, err, effects.ClassPermanent, "card_declined")
		require.Contains(t, err.Error(), "decline_code generic_decline")
		require.NotContains(t, err.Error(), "client_secret")
		require.NotContains(t, err.Error(), "_secret_")
		require.Equal(t, 0, b.stripe.Effects())
	})

	t.Run("OtherParametersIsIdempotencyError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := execute(t, b.effect, request("obx_i", okArgs), 5*time.Second)
		require.NoError(t, err)
		_, err = execute(t, b.effect, request("obx_i", `{"customer": "cus_1", "amount": 2999, "currency": "usd"}`), 5*time.Second)
		requireClass(t, err, effects.ClassPermanent, "idempotency_error")
		require.Contains(t, b.logs.String(), "level=ERROR")
		require.Contains(t, b.logs.String(), "derivation")
		require.Equal(t, 1, b.stripe.Effects())
	})

	t.Run("KeyInUseIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.stripe.Misbehave(sandbox.Fault{Kind: sandbox.FaultHangAfter})
		done := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			_, err := b.effect.Execute(ctx, request("obx_c", okArgs))
			done <- err
		}()
		waitCtx, waitCancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer waitCancel()
		require.NoError(t, b.stripe.WaitHanging(waitCtx, "obx_c"))
		_, err := execute(t, b.effect, request("obx_c", okArgs), 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "idempotency_key_in_use")
		cancel()
		requireClass(t, <-done, effects.ClassAmbiguous, "")

		// Once the first request is over, its answer is replayed.
		require.Eventually(t, func() bool {
			res, err := execute(t, b.effect, request("obx_c", okArgs), 5*time.Second)
			return err == nil && res.Replayed
		}, 5*time.Second, 20*time.Millisecond)
		require.Equal(t, 1, b.stripe.Effects())
	})

	t.Run("RateLimitedIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.stripe.Misbehave(sandbox.Fault{Kind: sandbox.FaultTooManyRequests})
		_, err := execute(t, b.effect, request("obx_r", okArgs), 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "rate_limit")
		_, err = execute(t, b.effect, request("obx_r", okArgs), 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, 1, b.stripe.Effects())
	})

	t.Run("ServerErrorsAreAmbiguous", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.stripe.Misbehave(sandbox.Fault{Kind: sandbox.FaultUnavailable}, sandbox.Fault{Kind: sandbox.FaultServerError})
		_, err := execute(t, b.effect, request("obx_s1", okArgs), 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "")
		_, err = execute(t, b.effect, request("obx_s2", okArgs), 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "stripe_server_error")
		// Stripe keeps the 500 against the key and replays it.
		_, err = execute(t, b.effect, request("obx_s2", okArgs), 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "stripe_server_error")
		require.Equal(t, 1, b.stripe.Effects())
	})

	t.Run("ResetAfterChargingIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.stripe.Misbehave(sandbox.Fault{Kind: sandbox.FaultReset})
		_, err := execute(t, b.effect, request("obx_x", okArgs), 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "connection_lost")
		res, err := execute(t, b.effect, request("obx_x", okArgs), 5*time.Second)
		require.NoError(t, err)
		require.True(t, res.Replayed)
		require.Equal(t, 1, b.stripe.Effects())
	})

	t.Run("SlowAnswerIsAmbiguousTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.stripe.Misbehave(sandbox.Fault{Kind: sandbox.FaultSlow, Delay: 5 * time.Second})
		_, err := execute(t, b.effect, request("obx_t", okArgs), 300*time.Millisecond)
		requireClass(t, err, effects.ClassAmbiguous, "timeout")
		require.Equal(t, 1, b.stripe.Effects())
		require.Eventually(t, func() bool {
			res, err := execute(t, b.effect, request("obx_t", okArgs), 5*time.Second)
			return err == nil && res.Replayed
		}, 5*time.Second, 20*time.Millisecond)
		require.Equal(t, 1, b.stripe.Effects())
	})

	t.Run("BadKeyIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, err := charge.New(&charge.Config{APIKey: "sk_test_wrong_key", URL: b.stripe.URL()})
		require.NoError(t, err)
		_, err = e.Execute(context.Background(), request("obx_k", okArgs))
		requireClass(t, err, effects.ClassPermanent, "stripe_401")
		require.NotContains(t, err.Error(), "sk_test_wrong_key")
	})

	t.Run("ConnectionRefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		url := b.stripe.URL()
		b.stripe.Close()
		e, err := charge.New(&charge.Config{APIKey: testAPIKey, URL: url})
		require.NoError(t, err)
		_, err = execute(t, e, request("obx_n", okArgs), 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "connection_failed")
	})

	t.Run("InvalidArgsArePermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := execute(t, b.effect, request("obx_v", `{"amount": 1}`), 5*time.Second)
		requireClass(t, err, effects.ClassPermanent, "invalid_args")
		var argErr *effects.ArgError
		require.True(t, errors.As(err, &argErr))
		require.Equal(t, 0, b.stripe.Requests())
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := charge.New(nil)
	require.ErrorContains(t, err, "APIKey must be set")
	_, err = charge.New(&charge.Config{})
	require.ErrorContains(t, err, "APIKey must be set")
	e, err := charge.New(&charge.Config{APIKey: testAPIKey})
	require.NoError(t, err)
	require.Equal(t, "charge", e.Name())
	require.Equal(t, effects.GuaranteeDeduplicated, e.Guarantee())
	require.Equal(t, 24*time.Hour, effects.DedupeWindow(e))
}

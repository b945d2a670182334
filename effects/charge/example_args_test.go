package charge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
)

// Check a charge's arguments as an enqueue does: good ones are accepted
// (the currency in lower case), a bad one is refused naming its field.
func ExampleParseArgs() {
	for _, args := range []string{
		`{"customer": "cus_123", "amount": 1999, "currency": "EUR"}`,
		`{"customer": "cus_123", "amount": 0, "currency": "eur"}`,
		`{"customer": "cus_123", "amount": 1999, "currency": "euro"}`,
		`{"customer": "cus_123", "amount": 1999, "currency": "eur", "coupon": "x"}`,
	} {
		parsed, err := charge.ParseArgs(json.RawMessage(args))
		var argErr *effects.ArgError
		switch {
		case errors.As(err, &argErr):
			fmt.Printf("refused: field %q: %s\n", argErr.Field, argErr.Message)
		case err != nil:
			panic(err)
		default:
			fmt.Println("accepted:", parsed.Customer, parsed.Amount, parsed.Currency)
		}
	}

	// Arguments that reach Execute unchecked fail permanently with code
	// invalid_args, before Stripe is called.
	effect, err := charge.New(&charge.Config{APIKey: "sk_test_example"})
	if err != nil {
		panic(err)
	}
	_, err = effect.Execute(context.Background(), &effects.Request{
		Args:        json.RawMessage(`{"customer": "cus_123", "amount": -5, "currency": "eur"}`),
		Attempt:     1,
		ProviderKey: "example-provider-key",
	})
	fmt.Println(effects.Classify(err))

	// Output:
	// accepted: cus_123 1999 eur
	// refused: field "amount": must be more than 0 (in the currency's minor unit)
	// refused: field "currency": must be a three-letter ISO 4217 code such as usd
	// refused: field "coupon": is not a known argument
	// permanent invalid_args
}

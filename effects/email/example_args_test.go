package email_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/email"
)

// Check an email's arguments as an enqueue does: good ones are accepted,
// a bad one is refused naming its field (an address by its index).
func ExampleParseArgs() {
	for _, args := range []string{
		`{"to": ["Ada <ada@example.com>"], "subject": "Your order", "text": "Shipped today."}`,
		`{"to": ["ada@example.com", "not an address"], "subject": "Your order", "text": "Shipped today."}`,
		`{"to": ["ada@example.com"], "subject": "Your order"}`,
		`{"to": [], "subject": "Your order", "text": "Shipped today."}`,
	} {
		parsed, err := email.ParseArgs(json.RawMessage(args))
		var argErr *effects.ArgError
		switch {
		case errors.As(err, &argErr):
			fmt.Printf("refused: field %q: %s\n", argErr.Field, argErr.Message)
		case err != nil:
			panic(err)
		default:
			fmt.Println("accepted:", parsed.To[0].Address, parsed.Subject)
		}
	}

	// Arguments that reach Execute unchecked fail permanently with code
	// invalid_args, before the SMTP server is dialled.
	effect, err := email.New(&email.Config{Addr: "127.0.0.1:1025", From: "Shop <shop@example.com>", TLS: email.TLSNone})
	if err != nil {
		panic(err)
	}
	_, err = effect.Execute(context.Background(), &effects.Request{
		Args:        json.RawMessage(`{"to": ["ada@example.com"]}`),
		Attempt:     1,
		ProviderKey: "example-provider-key",
	})
	fmt.Println(effects.Classify(err))
	// Every attempt of one intent sends the same Message-ID.
	fmt.Println(effect.MessageID("example-provider-key"))

	// Output:
	// accepted: ada@example.com Your order
	// refused: field "to[1]": is not a valid email address
	// refused: field "text": text or html is required
	// refused: field "to": must hold 1 to 50 addresses
	// permanent invalid_args
	// example-provider-key@example.com
}

package ticket_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/ticket"
)

// Check a ticket's arguments as an enqueue does: good ones are accepted,
// a bad one is refused naming its field (a tag by its index).
func ExampleParseArgs() {
	for _, args := range []string{
		`{"subject": "Refund request", "body": "Order 42 arrived broken.", "priority": "high", "tags": ["refund"]}`,
		`{"subject": "Refund request", "body": "Order 42 arrived broken.", "priority": "asap"}`,
		`{"subject": "Refund request", "body": "Order 42 arrived broken.", "tags": ["refund", "two words"]}`,
		`{"subject": "Refund request"}`,
	} {
		parsed, err := ticket.ParseArgs(json.RawMessage(args))
		var argErr *effects.ArgError
		switch {
		case errors.As(err, &argErr):
			fmt.Printf("refused: field %q: %s\n", argErr.Field, argErr.Message)
		case err != nil:
			panic(err)
		default:
			fmt.Println("accepted:", parsed.Subject, parsed.Priority, parsed.Tags)
		}
	}

	// Arguments that reach Execute unchecked fail permanently with code
	// invalid_args, before Zendesk is called.
	effect, err := ticket.New(&ticket.Config{URL: "https://acme.zendesk.com", Email: "agent@example.com", Token: "example-token"})
	if err != nil {
		panic(err)
	}
	_, err = effect.Execute(context.Background(), &effects.Request{
		Args:        json.RawMessage(`{"subject": "", "body": "Order 42 arrived broken."}`),
		Attempt:     1,
		ProviderKey: "example-provider-key",
	})
	fmt.Println(effects.Classify(err))

	// Output:
	// accepted: Refund request high [refund]
	// refused: field "priority": must be low, normal, high or urgent
	// refused: field "tags[1]": must be a word of 1 to 255 characters without spaces or commas
	// refused: field "body": is required
	// permanent invalid_args
}

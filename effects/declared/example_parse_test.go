package declared_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
)

// Declare an HTTP effect in a file, register it like a built-in, and run
// two attempts of one intent against a provider that dedupes on the
// Idempotency-Key: the retry is answered from the first attempt's message,
// and one message is posted.
func ExampleParse() {
	var mu sync.Mutex
	posted := map[string]int{} // Idempotency-Key -> message number
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		if _, ok := posted[key]; !ok {
			posted[key] = len(posted) + 1
		}
		fmt.Fprintf(w, `{"message": {"id": "msg_%d"}}`, posted[key])
	}))
	defer provider.Close()

	const file = `effects:
  notify_team:
    description: Post a message to the team's channel.
    guarantee: deduplicated
    dedupe_window: 24h
    args:
      type: object
      required: [text]
      properties: {text: {type: string, minLength: 1}}
      additionalProperties: false
    request:
      url: "{env.CHAT_URL}/messages"
      headers: {Idempotency-Key: "{provider_key}"}
      body: {text: "{args.text}"}
    result: {id: /message/id}
`
	effs, err := declared.Parse("effects.yaml", []byte(file), &declared.Config{
		LookupEnvFunc: func(name string) (string, bool) { return provider.URL, name == "CHAT_URL" },
		LoopbackOnly:  true,
	})
	if err != nil {
		panic(err) // a declared.FileErrors: every problem, by line
	}
	registry, err := effects.NewRegistry(effs[0])
	if err != nil {
		panic(err)
	}
	effect, _ := registry.Get("notify_team")
	fmt.Println(effect.Name(), effect.Guarantee())
	fmt.Println(effect.ValidateArgs(json.RawMessage(`{"text": ""}`)))

	for attempt := 1; attempt <= 2; attempt++ {
		result, err := effect.Execute(context.Background(), &effects.Request{
			Args:        json.RawMessage(`{"text": "Deploy done"}`),
			Attempt:     attempt,
			ProviderKey: "example-provider-key", // the same on every attempt
		})
		if err != nil {
			panic(err)
		}
		fmt.Println(string(result))
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("messages posted:", len(posted))

	// Output:
	// notify_team deduplicated
	// invalid args: text: minLength: got 0, want 1
	// {"id":"msg_1"}
	// {"id":"msg_1"}
	// messages posted: 1
}

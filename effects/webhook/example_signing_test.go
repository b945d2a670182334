package webhook_test

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/webhook"
)

// Send one signed webhook to a receiver that checks the signature as the
// Standard Webhooks specification says, then see an unknown endpoint
// refused.
func ExampleEffect_Execute() {
	const secret = "whsec_c2VjcmV0LWtleS1mb3ItdGhlLWV4YW1wbGU=" // base64 of the key
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		panic(err)
	}
	received := make(chan string, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		unix, _ := strconv.ParseInt(ts, 10, 64)
		valid := hmac.Equal([]byte(webhook.Sign(key, id, unix, body)), []byte(r.Header.Get("webhook-signature")))
		received <- fmt.Sprintf("id %s, timestamp %s, signature valid %t, body %s", id, ts, valid, body)
	}))
	defer receiver.Close()

	effect, err := webhook.New(&webhook.Config{
		Endpoints: []webhook.Endpoint{{Name: "orders", URL: receiver.URL, Dedupe: true}},
		NowFunc:   func() time.Time { return time.Unix(1_700_000_000, 0) }, // a fixed clock, for the output
		Secret:    secret,
	})
	if err != nil {
		panic(err)
	}
	result, err := effect.Execute(context.Background(), &effects.Request{
		Args:        json.RawMessage(`{"endpoint": "orders", "payload": {"order": 42, "status": "shipped"}}`),
		Attempt:     1,
		ProviderKey: "example-provider-key",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(<-received)
	fmt.Println(string(result))

	_, err = effect.ParseArgs(json.RawMessage(`{"endpoint": "https://attacker.example", "payload": {}}`))
	fmt.Println(err)

	// Output:
	// id example-provider-key, timestamp 1700000000, signature valid true, body {"order":42,"status":"shipped"}
	// {"endpoint":"orders","status":200}
	// invalid args: endpoint: is not a configured endpoint; configured: orders
}

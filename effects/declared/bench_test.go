package declared_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/effects/declared"
)

// paymentIntent is the stand-in's answer to both effects: the same bytes,
// so that the difference between them is outbox's own work (building the
// request, classifying the answer, extracting the result), not the
// provider's.
const paymentIntent = `{"id":"pi_123","object":"payment_intent","amount":1999,"currency":"usd","customer":"cus_1","status":"succeeded","latest_charge":"ch_1"}`

const declaredCharge = `effects:
  decl_charge:
    description: Charge a card (declared).
    guarantee: deduplicated
    dedupe_window: 24h
    args:
      type: object
      required: [customer, amount, currency]
      properties:
        customer: {type: string}
        amount: {type: integer, minimum: 1}
        currency: {type: string}
        payment_method: {type: string}
    request:
      url: "%s/v1/payment_intents"
      headers:
        Authorization: "Bearer sk_test_bench"
        Idempotency-Key: "{provider_key}"
      encoding: form
      body:
        customer: "{args.customer}"
        amount: "{args.amount}"
        currency: "{args.currency}"
        payment_method: "{args.payment_method}"
        confirm: "true"
    outcome:
      - when: status == 402
        class: permanent
        code: card_declined
    result: {id: /id, status: /status}
`

// BenchmarkExecute compares one declared effect's attempt with the Go
// charge effect's, against the same loopback stand-in: go test
// ./effects/declared -run '^$' -bench Execute -benchmem -count 5. The
// ratio of their ns/op (and CPU: -cpuprofile) is the declared effect's
// cost; the HTTP round trip both pay is part of each figure.
func BenchmarkExecute(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_1")
		_, _ = w.Write([]byte(paymentIntent))
	}))
	defer srv.Close()

	goCharge, err := charge.New(&charge.Config{APIKey: "sk_test_bench", URL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	effs, err := declared.Parse("effects.yaml", []byte(fmt.Sprintf(declaredCharge, srv.URL)), nil)
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"customer": "cus_1", "amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}`)
	for _, e := range []effects.Effect{goCharge, effs[0]} {
		b.Run(e.Name(), func(b *testing.B) {
			req := &effects.Request{Args: args, Attempt: 1, IntentID: 1, ProviderKey: "pk_bench"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Execute(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

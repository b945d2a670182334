// Package charge is the effect that charges a card through Stripe: it creates
// and confirms a PaymentIntent with the official client stripe-go, sending
// the intent's provider key as Stripe's Idempotency-Key.
//
// Its guarantee is deduplicated: Stripe keeps the first answer for each
// Idempotency-Key for 24 hours and replays it to every later request with the
// same key, so an attempt whose outcome was lost is retried with the same key
// and charges once.
//
// # Errors
//
//   - A card error (402, such as card_declined) is permanent; the intent's
//     error has Stripe's code and the issuer's decline code.
//   - An idempotency_error (400: the key came back with other parameters) is
//     permanent and logged at error level: provider keys are derived from the
//     intent, whose arguments cannot change, so it means that derivation broke.
//   - 409 (idempotency_key_in_use: a request with this key is still running)
//     and 429 (rate limited, or a lock timeout) are not sent: Stripe did not
//     process them.
//   - Other 4xx (invalid request, authentication, permission, not found) are
//     permanent.
//   - 5xx, timeouts and connections lost after the request was written are
//     ambiguous. A connection that failed before the request was written in
//     full is not sent.
package charge

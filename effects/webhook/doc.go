// Package webhook is the effect that POSTs a JSON payload to an endpoint the
// operator configured by name, signed per the Standard Webhooks
// specification (https://www.standardwebhooks.com): headers webhook-id (the
// intent's provider key, the same on every attempt), webhook-timestamp (the
// attempt's Unix time) and webhook-signature ("v1," and the base64
// HMAC-SHA256 of "id.timestamp.body" under the secret), plus Idempotency-Key
// (the provider key again) for receivers that dedupe on that header.
//
// Intents name an endpoint, never a URL, so no intent can make the worker
// call an address the operator did not configure.
//
// # Guarantee
//
// An endpoint configured as deduplicating (";dedupe") promises to dedupe on
// webhook-id: a lost outcome may be retried with the same id. Any other
// endpoint is at most once. The guarantee is the effect's, not the
// endpoint's, so the effect is deduplicated only when every configured
// endpoint dedupes, and at most once as soon as one does not: the safe
// reading of a mixed configuration.
//
// # Errors
//
//   - Not sent: the request was not written out in full, and 429 and 503,
//     which receivers answer when they did not process a request.
//   - Permanent: other 4xx.
//   - Ambiguous: other 5xx and anything unexpected, timeouts and connections
//     lost after the request was sent.
package webhook

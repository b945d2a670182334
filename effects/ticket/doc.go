// Package ticket is the effect that opens a support ticket through the
// Zendesk Tickets API, authenticated with an API token. Each ticket carries
// the intent's provider key as its external_id.
//
// Its guarantee is reconcilable: Zendesk does not dedupe on external_id, but
// it can be asked for the tickets with one (Lookup), so after an attempt
// whose outcome was lost the worker looks the ticket up, once that attempt's
// lease expired, and sends again only if it is not there.
//
// # Errors
//
//   - Not sent: the request was not written out in full (connection refused,
//     DNS), and 429 and 503, which Zendesk answers (with Retry-After) to
//     requests it did not process.
//   - Permanent: other 4xx (401 bad credentials, 403, 404, 422 invalid ticket).
//   - Ambiguous: other 5xx, timeouts and connections lost after the request
//     was sent: the worker reconciles by look-up.
package ticket

// Package httpsend is the HTTP plumbing shared by the effects that call a
// provider over HTTP (charge, ticket, webhook): a transport that records
// whether a request was written out in full, which is what tells a failure
// that surely reached nothing ("not sent") from one that may have reached the
// provider ("ambiguous"), and the classification of transport errors.
//
// Each request is an OpenTelemetry client span (otelhttp) of the attempt's
// trace, named by the effect's URL template (WithURLTemplate).
//
// Messages and spans never quote a URL: a webhook URL can carry a token.
package httpsend

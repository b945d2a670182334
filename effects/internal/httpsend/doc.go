// Package httpsend is the HTTP plumbing shared by the effects that call a
// provider over HTTP (charge, ticket, webhook): a transport that records
// whether a request was written out in full, which is what tells a failure
// that surely reached nothing ("not sent") from one that may have reached the
// provider ("ambiguous"), and the classification of transport errors.
//
// Messages never quote a URL: a webhook URL can carry a token.
package httpsend

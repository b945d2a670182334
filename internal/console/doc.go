// Package console is the operator console that outboxd serve mounts at
// /console/ (on the admin listener when there is one, else beside River
// UI): server-rendered pages over the intents, for the person who resolves
// an unknown intent at 3 a.m. or approves a charge above the limit.
//
//	GET  /console/                                  overview: counts, oldest pending, last hour, repairs
//	GET  /console/intents                           list: namespace, state, effect, key prefix, created between
//	GET  /console/intents/{namespace}/{key}         one intent: args (redacted), River jobs, timeline
//	POST /console/intents/{namespace}/{key}/approve approve the args_sha256 the form showed (also deny, resolve, cancel)
//	GET  /console/unknown                           the unknown queue, with a resolve form each
//	GET  /console/approvals                         intents awaiting approval, args in full, time left
//	GET  /console/bulk/cancel                       preview a bulk cancel of pending intents; POST does it
//	GET  /console/login                             sign in with an operator or reader token (form field token)
//
// Who may do what is the HTTP API's (package access): an operator or reader
// token, entered once and kept server-side behind a Secure, HttpOnly,
// SameSite=Strict session cookie, acts for its namespace with its role; the
// River UI basic-auth user (OUTBOX_UI_USER) acts as operator over every
// namespace; without tokens and without that user, loopback requests do,
// as River UI's rule has it. Agent tokens are refused: the console is for
// people. Readers see everything of their namespace and change nothing.
//
// Every change goes through outbox.Client, as the API's do, and is recorded
// with by = access.ConsoleActor. Every request that may change something
// passes net/http's CrossOriginProtection first.
//
// Pages are html/template, embedded; they work without JavaScript. One
// small script refreshes the overview's counts.
package console

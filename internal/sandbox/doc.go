// Package sandbox runs local stand-ins for outbox's providers, as real
// servers on the loopback interface: a Stripe-like payments API, an SMTP
// sink, a Zendesk-like tickets API and a webhook receiver. outboxd starts them
// with OUTBOX_SANDBOX=true (for the demo and development); tests start them
// in their own process and point outboxd at them.
//
// Each stand-in counts the effects it performed (charges, messages, tickets,
// deliveries) apart from the requests it received, in all and per key (the
// intent's provider key as the provider sees it), so a test can tell "one
// charge, three requests" from "three charges". Each can be told to misbehave
// on its next effect requests (Misbehave), or on the next ones with a key
// (MisbehaveFor, so that concurrent cases sharing one stand-in get their own
// faults): answer 429 or 503, or refuse, before performing the effect; or
// perform it and then answer 500, reset the connection, answer slower than
// the client waits, or hang until the client goes away (WaitHanging tells a
// test when, which is where it kills the client). The HTTP stand-ins also
// take faults and report counts over HTTP, under /_sandbox/.
//
// The stand-ins are for development and tests: they listen on loopback only,
// keep everything in memory and forget it when closed.
//
// Everything under this directory is a stand-in that outboxd runs on
// purpose, and ships in it: this package, the noop effect (package noop)
// and the demo's MCP server (package mcpupstream). What only tests use
// lives with the tests, under integration/internal.
package sandbox

// Package argcheck holds the argument checks the shipped effects share: a
// strict decoder that names the offending field, and checks for the kinds of
// values their schemas use (integers, email addresses, header-safe text).
//
// Every failure is an *effects.ArgError. Its message never quotes the value:
// arguments carry personal data (addresses, bodies), and an argument error
// found by the dispatcher is stored in the intent.
package argcheck

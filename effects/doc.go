// Package effects defines what an effect is to outbox: a named kind of side
// effect with an argument schema, a delivery guarantee, an Execute that
// receives a stable provider key, and, for reconcilable effects, a Lookup.
//
// An effect classifies its own errors (NotSent, Permanent, Ambiguous), because
// only the effect knows whether a provider's answer means "nothing happened"
// or "something may have happened". The workers never guess: an error an
// effect did not classify is treated as Ambiguous, the safe assumption.
package effects

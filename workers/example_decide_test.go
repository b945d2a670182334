package workers_test

import (
	"fmt"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/workers"
)

// Read the state machine's table one situation at a time: what an attempt
// knows, and what Decide makes it do next.
func ExampleDecide() {
	situations := []struct {
		name string
		sit  workers.Situation
	}{
		{"first attempt", workers.Situation{Step: workers.StepStart, Guarantee: effects.GuaranteeAtMostOnce}},
		{"lost outcome, at_most_once", workers.Situation{Step: workers.StepStart, Guarantee: effects.GuaranteeAtMostOnce, Lost: true}},
		{"lost outcome, reconcilable", workers.Situation{Step: workers.StepStart, Guarantee: effects.GuaranteeReconcilable, Lost: true}},
		{"looked up and found", workers.Situation{Step: workers.StepLookedUp, Guarantee: effects.GuaranteeReconcilable, Lost: true, Found: true}},
		{"ambiguous answer, deduplicated", workers.Situation{Step: workers.StepCalled, Guarantee: effects.GuaranteeDeduplicated, Class: effects.ClassAmbiguous}},
		{"ambiguous answer, last attempt", workers.Situation{Step: workers.StepCalled, Guarantee: effects.GuaranteeDeduplicated, Class: effects.ClassAmbiguous, Last: true}},
	}
	for _, s := range situations {
		d := workers.Decide(s.sit)
		switch d.Action {
		case workers.ActionSend:
			fmt.Printf("%s: send\n", s.name)
		case workers.ActionLookup:
			fmt.Printf("%s: look up\n", s.name)
		case workers.ActionFinish:
			fmt.Printf("%s: record %s (code %q, maybe sent %t, retry %t)\n", s.name, d.State, d.Code, d.MaybeSent, d.Retry)
		}
	}

	// Output:
	// first attempt: send
	// lost outcome, at_most_once: record unknown (code "outcome_lost", maybe sent true, retry false)
	// lost outcome, reconcilable: look up
	// looked up and found: record succeeded (code "", maybe sent false, retry false)
	// ambiguous answer, deduplicated: record pending (code "", maybe sent true, retry true)
	// ambiguous answer, last attempt: record unknown (code "", maybe sent true, retry false)
}

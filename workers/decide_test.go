package workers

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/outbox"
)

// TestDecide covers every row of Decide's table, without a database.
func TestDecide(t *testing.T) {
	t.Parallel()

	const (
		dedup = effects.GuaranteeDeduplicated
		recon = effects.GuaranteeReconcilable
		amo   = effects.GuaranteeAtMostOnce
	)
	send := Decision{Action: ActionSend}
	finish := func(state outbox.State, code, outcome string) Decision {
		return Decision{State: state, Code: code, Outcome: outcome}
	}
	maybeSent := func(d Decision) Decision { d.MaybeSent = true; return d }
	retry := func(d Decision) Decision { d.Retry = true; return d }

	tests := []struct {
		name string
		sit  Situation
		want Decision
	}{
		// At the start of an attempt.
		{"StartFirstAttemptSends", Situation{Guarantee: amo}, send},
		{"StartExhaustedNothingSentFails", Situation{Guarantee: dedup, Exhausted: true},
			finish(outbox.StateFailed, CodeAttemptsExhausted, "exhausted")},
		{"StartExhaustedMaybeSentIsUnknown", Situation{Guarantee: dedup, Exhausted: true, MaybeSent: true},
			maybeSent(finish(outbox.StateUnknown, CodeAttemptsExhausted, "exhausted"))},
		{"StartExhaustedComesBeforeLookup", Situation{Guarantee: recon, Exhausted: true, Lost: true},
			maybeSent(finish(outbox.StateUnknown, CodeAttemptsExhausted, "exhausted"))},
		{"StartDeclarationChangedAfterMaybeSentIsUnknown", Situation{Guarantee: dedup, MaybeSent: true, DeclarationChanged: true},
			maybeSent(finish(outbox.StateUnknown, CodeDeclarationChanged, "unknown"))},
		{"StartDeclarationChangedReconcilableLooksUpFirst", Situation{Guarantee: recon, MaybeSent: true, DeclarationChanged: true},
			Decision{Action: ActionLookup}},
		{"StartDeclarationChangedNeverSentSends", Situation{Guarantee: dedup, DeclarationChanged: true}, send},
		{"StartLostAtMostOnceIsUnknown", Situation{Guarantee: amo, Lost: true, MaybeSent: true},
			maybeSent(finish(outbox.StateUnknown, CodeOutcomeLost, "unknown"))},
		{"StartLostReconcilableLooksUp", Situation{Guarantee: recon, Lost: true}, Decision{Action: ActionLookup}},
		{"StartLostDeduplicatedSendsAgain", Situation{Guarantee: dedup, Lost: true, MaybeSent: true}, send},
		{"StartDeduplicatedPastWindowMaybeSentIsUnknown", Situation{Guarantee: dedup, MaybeSent: true, PastWindow: true},
			maybeSent(finish(outbox.StateUnknown, CodeDedupeWindowPassed, "unknown"))},
		{"StartDeduplicatedPastWindowNeverSentSends", Situation{Guarantee: dedup, PastWindow: true}, send},
		{"StartMaybeSentReconcilableLooksUp", Situation{Guarantee: recon, MaybeSent: true}, Decision{Action: ActionLookup}},
		{"StartReconcilablePastWindowIgnoresWindow", Situation{Guarantee: recon, MaybeSent: true, PastWindow: true}, Decision{Action: ActionLookup}},
		{"StartReconcilableNeverSentSends", Situation{Guarantee: recon, PastWindow: true}, send},

		// After a look-up.
		{"LookupFailedRetriesReleasingTheLease", Situation{Step: StepLookedUp, Guarantee: recon, Lost: true, LookupFailed: true},
			retry(maybeSent(finish(outbox.StateRunning, CodeLookupFailed, "lookup_failed")))},
		{"LookupFoundSucceeds", Situation{Step: StepLookedUp, Guarantee: recon, Lost: true, Found: true},
			finish(outbox.StateSucceeded, "", "reconciled")},
		{"LookupNotFoundSendsAgain", Situation{Step: StepLookedUp, Guarantee: recon, Lost: true}, send},
		{"LookupFoundUnderAnotherDeclarationSucceeds", Situation{Step: StepLookedUp, Guarantee: recon, MaybeSent: true, DeclarationChanged: true, Found: true},
			finish(outbox.StateSucceeded, "", "reconciled")},
		{"LookupNotFoundUnderAnotherDeclarationIsUnknown", Situation{Step: StepLookedUp, Guarantee: recon, MaybeSent: true, DeclarationChanged: true},
			maybeSent(finish(outbox.StateUnknown, CodeDeclarationChanged, "unknown"))},

		// After the call.
		{"CalledSuccessSucceeds", Situation{Step: StepCalled, Guarantee: amo},
			finish(outbox.StateSucceeded, "", "succeeded")},
		{"CalledPermanentFails", Situation{Step: StepCalled, Guarantee: dedup, Class: effects.ClassPermanent},
			finish(outbox.StateFailed, "", "failed")},
		{"CalledPermanentOnLastAttemptFails", Situation{Step: StepCalled, Guarantee: dedup, Class: effects.ClassPermanent, Last: true},
			finish(outbox.StateFailed, "", "failed")},
		{"CalledNotSentRetries", Situation{Step: StepCalled, Guarantee: amo, Class: effects.ClassNotSent},
			retry(finish(outbox.StatePending, "", "not_sent"))},
		{"CalledNotSentLastFails", Situation{Step: StepCalled, Guarantee: amo, Class: effects.ClassNotSent, Last: true},
			finish(outbox.StateFailed, CodeAttemptsExhausted, "not_sent")},
		{"CalledNotSentLastAfterMaybeSentIsUnknown", Situation{Step: StepCalled, Guarantee: dedup, Class: effects.ClassNotSent, Last: true, MaybeSent: true},
			maybeSent(finish(outbox.StateUnknown, CodeAttemptsExhausted, "not_sent"))},
		{"CalledAmbiguousAtMostOnceIsUnknown", Situation{Step: StepCalled, Guarantee: amo, Class: effects.ClassAmbiguous},
			maybeSent(finish(outbox.StateUnknown, "", "ambiguous"))},
		{"CalledAmbiguousReconcilableKeepsTheLease", Situation{Step: StepCalled, Guarantee: recon, Class: effects.ClassAmbiguous},
			Decision{State: outbox.StateRunning, Outcome: "ambiguous", MaybeSent: true, KeepLease: true, Retry: true}},
		{"CalledAmbiguousDeduplicatedRetries", Situation{Step: StepCalled, Guarantee: dedup, Class: effects.ClassAmbiguous},
			retry(maybeSent(finish(outbox.StatePending, "", "ambiguous")))},
		{"CalledAmbiguousReconcilableLastIsUnknown", Situation{Step: StepCalled, Guarantee: recon, Class: effects.ClassAmbiguous, Last: true},
			maybeSent(finish(outbox.StateUnknown, "", "ambiguous"))},
		{"CalledAmbiguousDeduplicatedLastIsUnknown", Situation{Step: StepCalled, Guarantee: dedup, Class: effects.ClassAmbiguous, Last: true},
			maybeSent(finish(outbox.StateUnknown, "", "ambiguous"))},
		{"CalledUnknownClassIsAmbiguous", Situation{Step: StepCalled, Guarantee: amo, Class: effects.Class("bogus")},
			maybeSent(finish(outbox.StateUnknown, "", "ambiguous"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Decide(tt.sit))
		})
	}
}

// TestDecideNeverResendsWhatMayHaveBeenSent checks one property over every
// combination of facts: an at-most-once intent that may have been sent is
// never sent again, and a deduplicated one past its window is never sent
// again.
func TestDecideNeverResendsWhatMayHaveBeenSent(t *testing.T) {
	t.Parallel()

	bools := []bool{false, true}
	for _, g := range []effects.Guarantee{effects.GuaranteeDeduplicated, effects.GuaranteeReconcilable, effects.GuaranteeAtMostOnce} {
		for _, lost := range bools {
			for _, maybe := range bools {
				for _, past := range bools {
					for _, exhausted := range bools {
						sit := Situation{Guarantee: g, Lost: lost, MaybeSent: maybe, PastWindow: past, Exhausted: exhausted}
						d := Decide(sit)
						if exhausted {
							require.Equal(t, ActionFinish, d.Action, "%+v", sit)
						}
						if g == effects.GuaranteeAtMostOnce && lost {
							require.NotEqual(t, ActionSend, d.Action, "%+v", sit)
						}
						if g == effects.GuaranteeDeduplicated && maybe && past {
							require.NotEqual(t, ActionSend, d.Action, "%+v", sit)
						}
						if d.Action == ActionFinish && d.State == outbox.StateFailed {
							require.False(t, maybe || lost, "failed after a possible send: %+v", sit)
						}
					}
				}
			}
		}
	}
}

// TestDecideReconcilableLooksUpBeforeEveryResend walks random histories of
// one reconcilable intent's attempts, with Decide choosing each step, and
// checks the property a look-up exists for: after any attempt that may have
// reached the provider, nothing is sent again unless a look-up made after
// that attempt found nothing. The facts an attempt sees are the ones the
// worker derives: Lost when the attempt before it died holding its claim,
// MaybeSent once anything may have been sent, including by a stale attempt
// whose late write was rejected (it marks maybe_sent after the fact).
func TestDecideReconcilableLooksUpBeforeEveryResend(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(1, 2))
	for walk := range 20000 {
		var (
			possibleSends bool // an attempt may have reached the provider
			cleanLookup   bool // a look-up that found nothing was made after the last possible send
			maybeSent     bool // the intent's maybe_sent column
			lost          bool // the previous attempt died holding its claim
			history       []string
		)
		for attempt := 1; attempt <= 8; attempt++ {
			if rng.IntN(4) == 0 {
				// A stale attempt, paused past its lease, comes back: its
				// request may have acted since anything this walk did.
				possibleSends, cleanLookup, maybeSent = true, false, true
				history = append(history, "stale attempt marks maybe_sent")
			}
			sit := Situation{Guarantee: effects.GuaranteeReconcilable, Lost: lost, MaybeSent: maybeSent, Last: attempt == 8}
			lost = false
			d := Decide(sit)
			history = append(history, fmt.Sprintf("attempt %d: %+v -> action %d", attempt, sit, d.Action))
			if d.Action == ActionLookup {
				sit.Step = StepLookedUp
				switch rng.IntN(3) {
				case 0:
					sit.LookupFailed = true
				case 1:
					sit.Found = possibleSends && rng.IntN(2) == 0
				}
				if !sit.Found && !sit.LookupFailed {
					cleanLookup = true
				}
				d = Decide(sit)
				history = append(history, fmt.Sprintf("  looked up (found %t, failed %t) -> action %d state %s", sit.Found, sit.LookupFailed, d.Action, d.State))
			}
			if d.Action == ActionSend {
				require.True(t, !possibleSends || cleanLookup, "walk %d: sent again after a possible send with no look-up since:\n%s", walk, strings.Join(history, "\n"))
				sit.Step = StepCalled
				if rng.IntN(5) == 0 {
					// The attempt dies mid-call: the next one finds the claim.
					possibleSends, cleanLookup, maybeSent, lost = true, false, true, true
					history = append(history, "  died mid-call")
					continue
				}
				sit.Class = []effects.Class{"", effects.ClassPermanent, effects.ClassNotSent, effects.ClassAmbiguous}[rng.IntN(4)]
				d = Decide(sit)
				history = append(history, fmt.Sprintf("  called (class %q) -> state %s", sit.Class, d.State))
				if sit.Class == effects.ClassAmbiguous {
					possibleSends, cleanLookup = true, false
				}
			}
			maybeSent = maybeSent || d.MaybeSent
			if d.State.Terminal() {
				break
			}
		}
	}
}

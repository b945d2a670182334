package demo

// An email whose server crashed mid-send: at most once, so unknown and
// never resent.

import (
	"context"

	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// emailCrash sends a receipt whose SMTP server keeps the message and drops
// the connection before its final reply: the worker cannot know whether
// the email went out.
func (s *Story) emailCrash(ctx context.Context) error {
	lost := &s.email
	lost.key = "demo-" + s.run + "-order-1001-receipt"
	sink := s.env.Sandbox.SMTP
	sink.Misbehave(sandbox.Fault{Kind: sandbox.FaultReset})
	args := map[string]any{
		"to":      []string{"ada@example.com"},
		"subject": "Your receipt for order 1001",
		"text":    "Thank you for your order. We charged your card 19.99 EUR.",
	}
	done := s.out.Progress("email: the mail server crashes mid-send")
	first, err := s.enqueue(ctx, lost.key, email.Name, args)
	if err != nil {
		done()
		return err
	}
	final, err := s.get(ctx, lost.key, WaitMax)
	if err != nil {
		done()
		return err
	}
	// The agent retries, as it did the charge.
	again, err := s.enqueue(ctx, lost.key, email.Name, args)
	done()
	if err != nil {
		return err
	}
	lost.calls, lost.final = []*apiAnswer{first, again}, final
	// The sink knows a message by its Message-ID, derived from the
	// provider key.
	providerKey := finalProviderKey(final)
	lost.effects, lost.requests = sink.EffectsFor(providerKey), sink.RequestsFor(providerKey)

	s.out.Printf("   email   at_most_once: SMTP can neither dedupe nor be asked whether a message went out.\n")
	s.out.Printf("           The mail server takes the receipt, then crashes before it answers.\n")
	s.out.Printf("           -> %s; %s in the mailbox; the agent's retry: %s.\n",
		final.stateLine(), plural(lost.effects, "email"), again.summary(false))
	s.out.Printf("           outbox does not guess and never sends it again: an operator checks and resolves it.\n")
	s.check(final.Intent != nil && final.Intent.State == outbox.StateUnknown && lost.effects == 1 && lost.requests == 1 &&
		again.Duplicate && again.Intent.State == outbox.StateUnknown,
		"the email whose server crashed mid-send ended unknown, sent once and never again")
	return nil
}

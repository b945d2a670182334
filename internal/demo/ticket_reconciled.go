package demo

// A ticket whose API answered 500 after creating it: found by look-up.

import (
	"context"
	"encoding/json"

	"github.com/outbox-dev/outbox/effects/ticket"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// ticketReconciled opens a ticket whose API creates it and then answers 500:
// the worker waits for the attempt's lease to end, then asks Zendesk by
// external_id.
func (s *Story) ticketReconciled(ctx context.Context) error {
	lost := &s.ticket
	lost.key = "demo-" + s.run + "-order-1001-ticket"
	zendesk := s.env.Sandbox.Zendesk
	zendesk.Misbehave(sandbox.Fault{Kind: sandbox.FaultServerError})
	args := map[string]any{
		"subject":  "Order 1001: customer asks for an invoice",
		"body":     "Please send an invoice for order 1001.",
		"priority": "normal",
	}
	done := s.out.Progress("ticket: the ticket API answers 500 after creating the ticket")
	first, err := s.enqueue(ctx, lost.key, ticket.Name, args)
	if err != nil {
		done()
		return err
	}
	final, err := s.get(ctx, lost.key, WaitMax)
	done()
	if err != nil {
		return err
	}
	lost.calls, lost.final = []*apiAnswer{first}, final
	providerKey := finalProviderKey(final)
	lost.effects, lost.requests = zendesk.EffectsFor(providerKey), zendesk.RequestsFor(providerKey)

	var result struct {
		TicketID int64 `json:"ticket_id"`
	}
	if final.Intent != nil {
		_ = json.Unmarshal(final.Intent.Result, &result)
	}
	found := false
	for _, t := range zendesk.Tickets() {
		if t.ExternalID == providerKey && t.ID == result.TicketID {
			found = true
		}
	}
	s.out.Printf("   ticket  reconcilable: Zendesk finds a ticket by its external_id, the provider key.\n")
	s.out.Printf("           The ticket API creates the ticket, then answers 500.\n")
	s.out.Printf("           -> once the attempt's lease (%s) ended, looked up: found ticket %d; %s;\n",
		2*ClientTimeout, result.TicketID, final.stateLine())
	s.out.Printf("              %s created, by %s.\n", plural(lost.effects, "ticket"), plural(lost.requests, "request"))
	s.check(final.Intent != nil && final.Intent.State == outbox.StateSucceeded && lost.effects == 1 && lost.requests == 1 && found,
		"the ticket was reconciled by look-up: succeeded with the ticket created once")
	return nil
}

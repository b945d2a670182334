package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/outbox"
)

// ApprovalRule is the demo's approval rule (OUTBOX_APPROVAL): a charge of
// 100.00 or more waits for a person.
const ApprovalRule = "charge:amount>=10000"

// bigChargeAmount is the charge above the limit.
const bigChargeAmount = 25000

// approval is part 4: the agent asks for a charge above the limit; the
// answer says it waits for a person; an approval given for other arguments
// (a screen that showed another amount) is refused; the right one releases
// it, and it is charged once.
func (s *Story) approval(ctx context.Context) error {
	done := s.out.Progress("a charge above the limit waits for a person")
	defer done()
	key := "demo-" + s.run + "-order-1003"
	args := map[string]any{"amount": bigChargeAmount, "currency": chargeCurrency, "customer": chargeCustomer,
		"payment_method": chargePaymentMethod, "description": "order 1003"}
	asked, err := s.enqueue(ctx, key, charge.Name, args)
	if err != nil {
		return err
	}
	if asked.Intent == nil {
		return fmt.Errorf("the charge above the limit was refused: %d %s", asked.status, asked.errCode)
	}
	stripe := s.env.Sandbox.Stripe
	waitingCharges := stripe.EffectsFor(asked.Intent.ProviderKey)

	// The operator's screen showed 25.00 instead of 250.00: its approval
	// names those arguments, and releases nothing.
	shown := map[string]any{}
	for k, v := range args {
		shown[k] = v
	}
	shown["amount"] = bigChargeAmount / 10
	shownJSON, _ := json.Marshal(shown) //nolint:errchkjson // plain values
	op := &outbox.ApprovalParams{Key: key, Namespace: s.env.Namespace, By: "demo-operator", ArgsSHA256: outbox.ArgsSHA256(shownJSON)}
	_, mismatchErr := s.env.Client.Approve(ctx, op)
	if mismatchErr != nil && !errors.Is(mismatchErr, outbox.ErrApprovalMismatch) {
		return mismatchErr
	}
	afterMismatch, err := s.get(ctx, key, 0)
	if err != nil {
		return err
	}

	op.ArgsSHA256, op.Note = asked.Intent.ArgsSHA256, "the customer confirmed order 1003"
	if _, err := s.env.Client.Approve(ctx, op); err != nil {
		return err
	}
	final, err := s.get(ctx, key, WaitMax)
	if err != nil {
		return err
	}
	charges := stripe.EffectsFor(finalProviderKey(final))
	done()

	rule := ""
	if asked.Intent.ApprovalRule != nil {
		rule = *asked.Intent.ApprovalRule
	}
	s.out.Printf("   the agent asks     %s %s: answered %s (rule %s), %s\n",
		money(bigChargeAmount), strings.ToUpper(chargeCurrency), asked.Intent.State, rule, plural(waitingCharges, "charge"))
	s.out.Printf("   a wrong approval   args_sha256 of %s %s instead: %s; still %s\n",
		money(bigChargeAmount/10), strings.ToUpper(chargeCurrency), outbox.ErrorCode(mismatchErr), afterMismatch.Intent.State)
	s.out.Printf("   the right one      args_sha256 %s…: %s, %s\n", asked.Intent.ArgsSHA256[:12], final.stateLine(), plural(charges, "charge"))
	s.check(asked.Intent.State == outbox.StateAwaitingApproval && waitingCharges == 0,
		"a charge above the limit waited for approval, not charged")
	s.check(errors.Is(mismatchErr, outbox.ErrApprovalMismatch) && afterMismatch.Intent.State == outbox.StateAwaitingApproval,
		"an approval for other arguments was refused (approval_mismatch) and released nothing")
	s.check(final.Intent != nil && final.Intent.State == outbox.StateSucceeded && charges == 1,
		fmt.Sprintf("the approved charge ran once (%s)", plural(charges, "charge")))
	return nil
}

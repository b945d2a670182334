package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/outbox-dev/outbox/effects/charge"
)

// modelReEmits is part 3: the model calls charge_card again with an
// idempotency key it invented, so the key says "new action" although the
// action is the same. Keys from models alone cannot stop that second charge;
// the model-key guard does. The demo sends the model's calls over the HTTP
// API with Idempotency-Key-Source: model, which is what /mcp's tools do for
// every call.
func (s *Story) modelReEmits(ctx context.Context) error {
	done := s.out.Progress("the model calls charge_card again, under a key of its own")
	defer done()
	args := func(customer string) map[string]any {
		return map[string]any{"amount": chargeAmount, "currency": chargeCurrency, "customer": customer,
			"payment_method": chargePaymentMethod, "description": "order 1002"}
	}
	stripe := s.env.Sandbox.Stripe
	charges := func(answers ...*apiAnswer) int {
		n := 0
		for _, a := range answers {
			if final, err := s.get(ctx, a.Intent.Key, WaitMax); err == nil {
				n += stripe.EffectsFor(finalProviderKey(final))
			}
		}
		return n
	}

	// Keys taken as given (no guard): two keys, two charges.
	unguarded := make([]*apiAnswer, 2)
	for i := range unguarded {
		a, err := s.modelCall(ctx, fmt.Sprintf("demo-%s-model-unguarded-%d", s.run, i+1), args("cus_demo_unguarded"), false, false)
		if err != nil {
			return err
		}
		unguarded[i] = a
	}
	unguardedCharges := charges(unguarded...)

	// The guard: the second call's fresh key is refused.
	first, err := s.modelCall(ctx, "demo-"+s.run+"-model-1", args(chargeCustomer), true, false)
	if err != nil {
		return err
	}
	refused, err := s.modelCall(ctx, "demo-"+s.run+"-model-2", args(chargeCustomer), true, false)
	if err != nil {
		return err
	}
	guardedCharges := charges(first)
	// The user really wants a second, identical charge: the model says so.
	confirmed, err := s.modelCall(ctx, "demo-"+s.run+"-model-2", args(chargeCustomer), true, true)
	if err != nil {
		return err
	}
	confirmedCharges := charges(first, confirmed)
	done()

	s.out.Printf("   without the guard  two calls, two fresh keys: %s\n", plural(unguardedCharges, "charge"))
	s.out.Printf("   with the guard     the second call is answered %d %s, naming the first key: %s\n",
		refused.status, refused.errCode, plural(guardedCharges, "charge"))
	s.out.Printf("   new_action: true   the model confirms a second purchase (key_source %s): %s\n",
		keySource(confirmed), plural(confirmedCharges, "charge"))
	s.check(unguardedCharges == 2, fmt.Sprintf("without the guard, a re-emitted call under a fresh key charged twice (%d charges)", unguardedCharges))
	s.check(refused.errCode == "possible_duplicate" && guardedCharges == 1,
		fmt.Sprintf("with the guard, the re-emission was refused as possible_duplicate and charged once (%d charge)", guardedCharges))
	s.check(confirmedCharges == 2 && keySource(confirmed) == "model_confirmed",
		fmt.Sprintf("a second purchase the model confirmed was charged (%d charges, key_source %s)", confirmedCharges, keySource(confirmed)))
	return nil
}

// modelCall records a charge under a key that came from the model: guarded
// (Idempotency-Key-Source: model) or not.
func (s *Story) modelCall(ctx context.Context, key string, args map[string]any, guarded, newAction bool) (*apiAnswer, error) {
	body, err := json.Marshal(map[string]any{"effect": charge.Name, "args": args, "requested_by": "demo-agent", "new_action": newAction})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.env.BaseURL+"/v1/intents", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if guarded {
		req.Header.Set("Idempotency-Key-Source", "model")
	}
	return s.api(req)
}

func keySource(a *apiAnswer) string {
	if a == nil || a.Intent == nil {
		return ""
	}
	return string(a.Intent.KeySource)
}

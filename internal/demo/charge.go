package demo

// The seed failure: an agent charges a card, Stripe is slow, the client
// times out, the framework retries and the model calls again; told once
// straight to Stripe and once through outbox.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/effects/charge"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// stripeAnswer is what one direct call of Stripe's API got.
type stripeAnswer struct {
	status   int
	id       string // the PaymentIntent's id, on success
	code     string // Stripe's error code
	replayed bool
	err      error
	timedOut bool
	after    time.Duration
}

func (a stripeAnswer) String() string {
	switch {
	case a.timedOut:
		return "timed out after " + ClientTimeout.String()
	case a.err != nil:
		return "error: " + a.err.Error()
	case a.status == http.StatusOK:
		return "200 " + shortID(a.id)
	default:
		return strconv.Itoa(a.status) + " " + a.code
	}
}

// chargeDirect is the agent's tool calling Stripe itself, with the
// Idempotency-Key a Stripe client makes for each request (and reuses when it
// retries that request). The tool gives up waiting after the client
// timeout, as an agent's tool call does, but the request it abandoned goes
// on: Stripe is processing it.
func (s *Story) chargeDirect(ctx context.Context) error {
	stripe := s.env.Sandbox.Stripe
	first, second := "direct-"+s.run+"-req-1", "direct-"+s.run+"-req-2"
	stripe.MisbehaveFor(first, sandbox.Fault{Kind: sandbox.FaultSlow, Delay: providerDelay})

	done := s.out.Progress("without outbox: the tool calls Stripe directly")
	start := time.Now()
	late := s.postCharge(ctx, first, start)
	call := func(ch <-chan stripeAnswer) stripeAnswer {
		select {
		case a := <-ch:
			return a
		case <-time.After(ClientTimeout):
			return stripeAnswer{timedOut: true}
		}
	}
	lane := &s.direct
	lane.calls[0] = call(late)
	// The framework retries the request that timed out: the same request,
	// the same Idempotency-Key.
	lane.calls[1] = call(s.postCharge(ctx, first, start))
	// The model calls the tool again: a new request, so a new key.
	lane.calls[2] = call(s.postCharge(ctx, second, start))
	// Call 1's answer comes once Stripe is done with it.
	if lane.calls[0].timedOut {
		select {
		case lane.late = <-late:
		case <-time.After(WaitMax):
			lane.late = stripeAnswer{err: errors.New("no answer")}
		case <-ctx.Done():
			done()
			return ctx.Err()
		}
	}
	done()
	lane.charges = stripe.EffectsFor(first) + stripe.EffectsFor(second)
	lane.requests = stripe.RequestsFor(first) + stripe.RequestsFor(second)
	s.check(lane.charges == 2, fmt.Sprintf("without outbox, the repeated call charged the card twice (%d charges)", lane.charges))
	return nil
}

// postCharge sends one charge request to the Stripe stand-in, in the
// background, with no deadline of its own (the caller's wait is the
// client's timeout).
func (s *Story) postCharge(ctx context.Context, key string, start time.Time) <-chan stripeAnswer {
	ch := make(chan stripeAnswer, 1)
	go func() {
		form := url.Values{
			"amount":         {strconv.Itoa(chargeAmount)},
			"confirm":        {"true"},
			"currency":       {chargeCurrency},
			"customer":       {chargeCustomer},
			"payment_method": {chargePaymentMethod},
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.env.Sandbox.Stripe.URL()+"/v1/payment_intents", strings.NewReader(form.Encode()))
		if err != nil {
			ch <- stripeAnswer{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+s.env.StripeKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Idempotency-Key", key)
		resp, err := s.http.Do(req)
		if err != nil {
			ch <- stripeAnswer{err: err, after: time.Since(start)}
			return
		}
		defer resp.Body.Close()
		var body struct {
			ID    string `json:"id"`
			Error struct {
				Code string `json:"code"`
				Type string `json:"type"`
			} `json:"error"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
		a := stripeAnswer{status: resp.StatusCode, id: body.ID, code: body.Error.Code, err: err,
			replayed: resp.Header.Get("Idempotent-Replayed") == "true", after: time.Since(start)}
		if a.code == "" {
			a.code = body.Error.Type
		}
		ch <- a
	}()
	return ch
}

// chargeWithOutbox is the same three calls through outbox's HTTP API: the
// tool records an intent under a key naming the action, and waits up to the
// client timeout for its outcome.
func (s *Story) chargeWithOutbox(ctx context.Context) error {
	lane := &s.outbox
	lane.key = "demo-" + s.run + "-order-1001-charge"
	// The story's parts run one after another, so the next charge Stripe
	// receives is the worker's.
	stripe := s.env.Sandbox.Stripe
	stripe.Misbehave(sandbox.Fault{Kind: sandbox.FaultSlow, Delay: providerDelay})
	args := map[string]any{
		"amount": chargeAmount, "currency": chargeCurrency, "customer": chargeCustomer,
		"payment_method": chargePaymentMethod, "description": "order 1001",
	}

	done := s.out.Progress("with outbox: the tool records an intent, and outbox's worker calls Stripe")
	defer done()
	for i := range lane.calls {
		a, err := s.enqueue(ctx, lane.key, charge.Name, args)
		if err != nil {
			return err
		}
		if i == 0 && a.Intent != nil && !a.Intent.State.Terminal() {
			// The tool waits for the outcome as long as the client would.
			if w, err := s.get(ctx, lane.key, ClientTimeout); err == nil {
				a.Intent = w.Intent
			}
		}
		lane.calls[i] = a
	}
	final, err := s.get(ctx, lane.key, WaitMax)
	if err != nil {
		return err
	}
	lane.final = final
	providerKey := finalProviderKey(final)
	if intent, err := s.env.Client.Get(ctx, s.env.Namespace, lane.key); err == nil && intent.JobID != nil {
		if job, err := s.env.Daemon.Dispatcher.River().JobGet(ctx, *intent.JobID); err == nil {
			lane.attempts = job.Attempt
		}
	}
	lane.charges = stripe.EffectsFor(providerKey)
	lane.requests = stripe.RequestsFor(providerKey)

	sameIntent := true
	for i, c := range lane.calls {
		if c.Intent == nil || c.Intent.ID != lane.calls[0].Intent.ID || c.Duplicate != (i > 0) {
			sameIntent = false
		}
	}
	s.check(lane.charges == 1 && sameIntent,
		fmt.Sprintf("with outbox, one charge (%d), and the two retries answered as duplicates of the first call's intent", lane.charges))
	var result struct {
		PaymentIntent string `json:"payment_intent"`
	}
	if final.Intent != nil {
		_ = json.Unmarshal(final.Intent.Result, &result)
	}
	s.check(final.Intent != nil && final.Intent.State == outbox.StateSucceeded && result.PaymentIntent != "" && slices.Contains(stripe.Charges(), result.PaymentIntent),
		"the intent succeeded with the PaymentIntent of that one charge")
	return nil
}

// printCharge prints part 1 side by side.
func (s *Story) printCharge() {
	d, o := &s.direct, &s.outbox
	tw := s.out.Table()
	fmt.Fprintf(tw, "   \t\twithout outbox: the tool calls Stripe\twith outbox: the tool records an intent\n")
	names := [3]string{"charge_card", "the framework retries", "the model calls again"}
	for i := range 3 {
		fmt.Fprintf(tw, "   call %d\t%s\t%s\t%s\n", i+1, names[i], d.calls[i], o.calls[i].summary(i == 0))
	}
	late := "-"
	if d.calls[0].timedOut {
		late = "call 1's answer, to nobody: " + d.late.String()
	}
	outcome := "-"
	if o.final != nil && o.final.Intent != nil {
		outcome = string(o.final.Intent.State)
		var r struct {
			PaymentIntent string `json:"payment_intent"`
			Replayed      bool   `json:"replayed"`
		}
		if json.Unmarshal(o.final.Intent.Result, &r) == nil && r.PaymentIntent != "" {
			outcome += " " + shortID(r.PaymentIntent)
			if r.Replayed {
				outcome += ", replayed by Stripe"
			}
		}
		if o.attempts > 0 {
			outcome += fmt.Sprintf(" (attempt %d)", o.attempts)
		}
	}
	fmt.Fprintf(tw, "   later\t\t%s\t%s\n", late, outcome)
	fmt.Fprintf(tw, "   at Stripe\t\t%d requests, %s\t%d requests, %s\n", d.requests, plural(d.charges, "charge"), o.requests, plural(o.charges, "charge"))
	tw.Flush() //nolint:errcheck // the writer's errors are its own
	s.out.Printf("\n   Without outbox, Stripe's Idempotency-Key covered the retried request, but the\n")
	s.out.Printf("   model's new call was a new request: a second charge. With outbox, the three calls\n")
	s.out.Printf("   carried one key naming the action: one intent, one River job, one charge. Its first\n")
	s.out.Printf("   attempt timed out too; River retried it with the same provider key, and Stripe\n")
	s.out.Printf("   answered from its memory instead of charging again.\n")
}

// finalProviderKey is the provider key of an answer's intent, "" without one.
func finalProviderKey(a *apiAnswer) string {
	if a == nil || a.Intent == nil {
		return ""
	}
	return a.Intent.ProviderKey
}

// shortID shortens a provider's id for the side-by-side table.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:11] + "…"
	}
	return id
}

func money(minor int) string { return fmt.Sprintf("%d.%02d", minor/100, minor%100) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

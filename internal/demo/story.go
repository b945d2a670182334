// Package demo tells the story outbox exists for, with real calls against
// a running outboxd (package daemon) and the sandbox's providers: an agent
// charges a card, the provider is slow, the client times out, the framework
// retries, the model calls the tool again; then each guarantee at work when
// an outcome is lost. outboxd demo (package cli) starts what the story
// needs and hands it an Env.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outbox-dev/outbox/internal/daemon"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// The demo's timing: the provider answers its slow request after
// providerDelay, and every client, the agent's and outbox's workers
// (OUTBOX_EFFECT_TIMEOUT), gives up after ClientTimeout.
const (
	ClientTimeout = time.Second
	providerDelay = 3 * time.Second

	// WaitMax bounds each wait for an outcome.
	WaitMax = 45 * time.Second

	// Schema is where the demo works on a database of the user's.
	Schema = "outbox_demo"

	// Workers are River's workers per effect queue in the demo.
	Workers = 10
)

// The charge the agent makes, as the demo prints it.
const (
	chargeAmount        = 1999
	chargeCurrency      = "eur"
	chargeCustomer      = "cus_demo"
	chargePaymentMethod = sandbox.PaymentMethodVisa
)

// Env is what the story runs against.
type Env struct {
	// BaseURL is outboxd's HTTP address, such as http://127.0.0.1:8080.
	BaseURL string
	// Client is outboxd's write-side client.
	Client *outbox.Client
	// Daemon is the running outboxd.
	Daemon *daemon.Daemon
	// Namespace is the namespace the agent acts in.
	Namespace string
	// Sandbox holds the stand-in providers the effects call.
	Sandbox *sandbox.Sandbox
	// StripeKey is the sandbox Stripe's API key, for the direct calls.
	StripeKey string
	// Token is the bearer token the agent sends, when tokens are
	// configured.
	Token string
}

// NewStory returns a telling of the story against env, written to out.
func NewStory(env *Env, out *Output) *Story {
	return &Story{
		env:  env,
		out:  out,
		http: &http.Client{Timeout: WaitMax + 10*time.Second},
		run:  randomHex(3),
	}
}

// UnknownEmailKey is the key of the email the story left unknown, for the
// operator's next step; empty before the story was told.
func (s *Story) UnknownEmailKey() string { return s.email.key }

// Story is one telling of the story, with what each part found.
type Story struct {
	env  *Env
	out  *Output
	http *http.Client
	// run makes this run's keys its own, so that a second demo on the same
	// database tells the same story.
	run string

	direct directLane
	outbox outboxLane
	email  lostLane
	ticket lostLane
	checks []checkResult
}

// directLane is the charge without outbox: the tool calls the provider.
type directLane struct {
	calls    [3]stripeAnswer
	late     stripeAnswer // call 1's answer, which came after the client gave up
	charges  int
	requests int
}

// outboxLane is the charge with outbox: the tool records an intent.
type outboxLane struct {
	key      string
	calls    [3]*apiAnswer
	final    *apiAnswer
	attempts int // River's attempts at the intent's job
	charges  int
	requests int
}

// lostLane is an effect whose outcome the demo makes the provider lose.
type lostLane struct {
	key      string
	calls    []*apiAnswer
	final    *apiAnswer
	effects  int
	requests int
}

type checkResult struct {
	ok   bool
	what string
}

func (s *Story) check(ok bool, what string) { s.checks = append(s.checks, checkResult{ok, what}) }

// Tell runs the story and prints it as it goes.
func (s *Story) Tell(ctx context.Context) error {
	s.out.Printf("\n1. An agent charges a card: %s %s to customer %s\n", money(chargeAmount), strings.ToUpper(chargeCurrency), chargeCustomer)
	s.out.Printf("   Stripe is slow: it makes the charge, then answers after %s. Every client gives up\n", providerDelay)
	s.out.Printf("   after %s. The agent's framework retries the request; the model, which saw only\n", ClientTimeout)
	s.out.Printf("   errors, calls the tool again. The same three calls, two ways:\n\n")
	if err := s.chargeDirect(ctx); err != nil {
		return err
	}
	if err := s.chargeWithOutbox(ctx); err != nil {
		return err
	}
	s.printCharge()

	s.out.Printf("\n2. Each guarantee, when a provider loses an outcome\n")
	if err := s.emailCrash(ctx); err != nil {
		return err
	}
	if err := s.ticketReconciled(ctx); err != nil {
		return err
	}
	s.out.Printf("   charge  deduplicated: Stripe keeps each Idempotency-Key's answer for 24 h, so a lost\n")
	s.out.Printf("           outcome is retried with the same provider key (part 1).\n")

	s.out.Printf("\n3. The model calls the tool again under a key it invented\n")
	if err := s.modelReEmits(ctx); err != nil {
		return err
	}

	s.out.Printf("\n4. A charge above the limit waits for a person (OUTBOX_APPROVAL=%s)\n", ApprovalRule)
	if err := s.approval(ctx); err != nil {
		return err
	}
	s.printSummary()
	return nil
}

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
		a, err := s.enqueue(ctx, lane.key, "charge", args)
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
	first, err := s.enqueue(ctx, lost.key, "email", args)
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
	again, err := s.enqueue(ctx, lost.key, "email", args)
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
	first, err := s.enqueue(ctx, lost.key, "ticket", args)
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

// printSummary prints the table of calls made against effects performed.
func (s *Story) printSummary() {
	s.out.Printf("\n5. Calls made, against effects performed\n")
	tw := s.out.Table()
	fmt.Fprintf(tw, "   effect\tpath\tagent's calls\tprovider requests\teffects\toutcome\n")
	fmt.Fprintf(tw, "   charge\twithout outbox\t%d\t%d\t%s\tthe failure: one purchase, charged twice\n",
		len(s.direct.calls), s.direct.requests, plural(s.direct.charges, "charge"))
	fmt.Fprintf(tw, "   charge\twith outbox\t%d\t%d\t%s\t%s\n",
		len(s.outbox.calls), s.outbox.requests, plural(s.outbox.charges, "charge"), s.outbox.final.stateLine())
	fmt.Fprintf(tw, "   email\twith outbox\t%d\t%d\t%s\t%s, for an operator\n",
		len(s.email.calls), s.email.requests, plural(s.email.effects, "email"), s.email.final.stateLine())
	fmt.Fprintf(tw, "   ticket\twith outbox\t%d\t%d (and 1 look-up)\t%s\t%s, reconciled\n",
		len(s.ticket.calls), s.ticket.requests, plural(s.ticket.effects, "ticket"), s.ticket.final.stateLine())
	tw.Flush() //nolint:errcheck // the writer's errors are its own
}

// PrintChecks prints every check and returns how many failed.
func (s *Story) PrintChecks() int {
	s.out.Printf("\nChecks\n")
	failed := 0
	for _, c := range s.checks {
		mark := "ok    "
		if !c.ok {
			mark = "FAILED"
			failed++
		}
		s.out.Printf("   %s %s\n", mark, c.what)
	}
	if failed == 0 {
		s.out.Printf("Every check held.\n")
	} else {
		s.out.Printf("%d of %d checks failed.\n", failed, len(s.checks))
	}
	return failed
}

// apiAnswer is one answer of outbox's HTTP API: an intent, or an error.
type apiAnswer struct {
	status    int
	errCode   string
	Duplicate bool
	Intent    *outbox.Intent
}

// summary is a call's answer in a few words; wait says the tool waited for
// the outcome.
func (a *apiAnswer) summary(waited bool) string {
	switch {
	case a == nil:
		return "-"
	case a.errCode != "":
		return fmt.Sprintf("%d %s", a.status, a.errCode)
	case a.Intent == nil:
		return strconv.Itoa(a.status)
	case a.Duplicate:
		return fmt.Sprintf("%d duplicate of intent %d, %s", a.status, a.Intent.ID, a.Intent.State)
	case waited && !a.Intent.State.Terminal():
		return fmt.Sprintf("%d intent %d recorded; %s after %s", a.status, a.Intent.ID, a.Intent.State, ClientTimeout)
	default:
		return fmt.Sprintf("%d intent %d recorded, %s", a.status, a.Intent.ID, a.Intent.State)
	}
}

// stateLine is the intent's state, with its error code if any.
func (a *apiAnswer) stateLine() string {
	if a == nil || a.Intent == nil {
		return "no answer"
	}
	if a.Intent.State != outbox.StateSucceeded && a.Intent.Error != nil {
		return string(a.Intent.State) + " (" + a.Intent.Error.Code + ")"
	}
	return string(a.Intent.State)
}

// enqueue is the agent's tool with outbox: POST /v1/intents.
func (s *Story) enqueue(ctx context.Context, key, effect string, args any) (*apiAnswer, error) {
	body, err := json.Marshal(map[string]any{"effect": effect, "args": args, "requested_by": "demo-agent"})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.env.BaseURL+"/v1/intents", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return s.api(req)
}

// get reads the intent, waiting up to wait for it to be terminal.
func (s *Story) get(ctx context.Context, key string, wait time.Duration) (*apiAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		s.env.BaseURL+"/v1/intents/"+url.PathEscape(key)+"?wait="+wait.String(), nil)
	if err != nil {
		return nil, err
	}
	return s.api(req)
}

func (s *Story) api(req *http.Request) (*apiAnswer, error) {
	if s.env.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.env.Token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("error calling outbox's API: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("error reading outbox's answer: %w", err)
	}
	a := &apiAnswer{status: resp.StatusCode}
	if resp.StatusCode >= 400 {
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &body); err != nil || body.Error.Code == "" {
			return nil, fmt.Errorf("error decoding outbox's answer (%d): %s", resp.StatusCode, bytes.TrimSpace(raw))
		}
		a.errCode = body.Error.Code
		return a, nil
	}
	var body struct {
		outbox.Intent
		Duplicate bool `json:"duplicate"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, fmt.Errorf("error decoding outbox's intent: %w", err)
	}
	a.Intent, a.Duplicate = &body.Intent, body.Duplicate
	return a, nil
}

// Output is where the demo writes, and its progress line.
type Output struct {
	w   io.Writer
	tty bool
}

// NewOutput returns an Output on w, with a live progress line when w is a
// terminal.
func NewOutput(w io.Writer) *Output { return &Output{w: w, tty: isTerminal(w)} }

// Printf writes to the output.
func (o *Output) Printf(format string, args ...any) { fmt.Fprintf(o.w, format, args...) }

// Table returns a writer that aligns tab-separated columns.
func (o *Output) Table() *tabwriter.Writer { return tabwriter.NewWriter(o.w, 0, 0, 2, ' ', 0) }

// Progress shows what the demo is doing until done is called: on a
// terminal, one line rewritten in place with the time elapsed, erased at the
// end; elsewhere, the line once.
func (o *Output) Progress(what string) (done func()) {
	if !o.tty {
		o.Printf("   ... %s\n", what)
		return func() {}
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stopped)
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		frames := `|/-\`
		for i := 0; ; i++ {
			fmt.Fprintf(o.w, "\r\033[K   %c %s (%.1fs)", frames[i%len(frames)], what, time.Since(start).Seconds())
			select {
			case <-stop:
				fmt.Fprint(o.w, "\r\033[K")
				return
			case <-ticker.C:
			}
		}
	}()
	var once bool
	return func() {
		if !once {
			once = true
			close(stop)
			<-stopped
		}
	}
}

// finalProviderKey is the provider key of an answer's intent, "" without one.
func finalProviderKey(a *apiAnswer) string {
	if a == nil || a.Intent == nil {
		return ""
	}
	return a.Intent.ProviderKey
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
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

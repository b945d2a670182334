// Package demo tells the story outbox exists for, with real calls against
// a running outboxd (package daemon) and the sandbox's providers: an agent
// charges a card, the provider is slow, the client times out, the framework
// retries, the model calls the tool again; then each guarantee at work when
// an outcome is lost. outboxd demo (package cli) starts what the story
// needs and hands it an Env.
package demo

import (
	"context"
	"fmt"
	"net/http"
	"strings"
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
	// Upstream is the MCP server behind outbox (part 5).
	Upstream *Upstream
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
	mcp    mcpLane
	tasks  mcpTasksLane
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
	if s.env.Upstream != nil {
		s.out.Printf("\n5. An MCP server behind outbox, called by a host that dispatches every call twice\n")
		if err := s.mcpUpstream(ctx); err != nil {
			return err
		}
	}
	s.out.Printf("\n6. A host on MCP 2026-07-28: its stream breaks, it re-issues the call; then it approves one\n")
	if err := s.mcpTasks(ctx); err != nil {
		return err
	}
	s.printSummary()
	return nil
}

// printSummary prints the table of calls made against effects performed.
func (s *Story) printSummary() {
	s.out.Printf("\n7. Calls made, against effects performed\n")
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
	if s.env.Upstream != nil {
		fmt.Fprintf(tw, "   MCP note\twithout outbox\t2\t2\t%s\ta host that dispatches twice\n", plural(s.mcp.directEffects, "note"))
		fmt.Fprintf(tw, "   MCP note\twith outbox\t2\t1\t%s\trecorded once, answered twice\n", plural(s.mcp.outboxEffects, "note"))
	}
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

package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/daemon"
	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

var cmdDemo = &command{
	name: "demo",
	args: "[--exit]",
	doc: `Shows, with real calls, the failure outbox exists for and how it ends with
and without outbox: an agent charges a card, the provider is slow, the client
times out, the framework retries, the model calls the tool again. Then each
guarantee at work when an outcome is lost: an email whose server crashed
mid-send ends unknown, a ticket is reconciled by look-up. A summary table
counts the calls made against the effects performed.

The demo needs nothing set. Without DATABASE_URL it starts a throwaway
PostgreSQL cluster from the binaries installed on the machine (initdb and
pg_ctl, on PATH or under /usr/lib/postgresql/*/bin) in a temporary directory,
and removes it on exit. With DATABASE_URL it works in schema outbox_demo, never
in OUTBOX_SCHEMA, so that no serve picks up its intents (DROP SCHEMA
outbox_demo CASCADE removes it). The providers are the sandbox's stand-ins on
loopback ports; nothing leaves the machine.

Once the story is told, the demo keeps serving the HTTP API, River UI and
/metrics on OUTBOX_HTTP_ADDR, or a free loopback port when that is not set,
until Ctrl-C. With --exit it stops at once, with exit status 0 only if every
check of the story held. Logs are off unless OUTBOX_LOG_LEVEL is set; then
they go to stderr.`,
}

// The demo's timing: the provider answers its slow request after
// demoProviderDelay, and every client, the agent's and outbox's workers
// (OUTBOX_EFFECT_TIMEOUT), gives up after demoClientTimeout.
const (
	demoClientTimeout = time.Second
	demoProviderDelay = 3 * time.Second

	// demoWaitMax bounds each wait for an outcome.
	demoWaitMax = 45 * time.Second

	// demoSchema is where the demo works on a database of the user's.
	demoSchema = "outbox_demo"

	// demoWorkers are River's workers per effect queue in the demo.
	demoWorkers = 10
)

// The charge the agent makes, as the demo prints it.
const (
	demoAmount        = 1999
	demoCurrency      = "eur"
	demoCustomer      = "cus_demo"
	demoPaymentMethod = sandbox.PaymentMethodVisa
)

func (a *app) demo(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdDemo)
	exit := fs.Bool("exit", false, "stop once the story is told; exit status 0 only if every check held")
	if _, err := a.parse(cmdDemo, fs, args, 0, 0); err != nil {
		return err
	}
	cfg, err := a.config(ctx)
	if err != nil {
		return err
	}
	env := nonEmptyLookuper{a.lookuper}
	if _, set := env.Lookup("OUTBOX_HTTP_ADDR"); !set {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	if err := checkAPIAuth(cfg); err != nil {
		return err
	}
	if err := checkUIAuth(cfg); err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if _, set := env.Lookup("OUTBOX_LOG_LEVEL"); set {
		logger = newLogger(cfg, a.stderr)
	}

	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	out := &demoOutput{w: a.stdout, tty: isTerminal(a.stdout)}
	out.printf("outbox demo: one charge, asked for by an agent that repeats itself, with and without outbox\n\n")
	de, err := startDemoEnv(ctx, cfg, logger, out)
	defer de.stop()
	if err != nil {
		return err
	}

	s := &demoStory{
		env:  de,
		out:  out,
		http: &http.Client{Timeout: demoWaitMax + 10*time.Second},
		run:  randomHex(3),
	}
	if err := s.tell(ctx); err != nil {
		if ctx.Err() != nil {
			out.printf("\ninterrupted\n")
			return &exitError{code: ExitFailure}
		}
		return err
	}
	failed := s.printChecks()
	_ = de.refreshGauges(ctx) // refreshed every second anyway

	base := de.baseURL
	out.printf("\n")
	if *exit {
		out.printf("What you would look at next (the demo stops now: --exit):\n")
	} else {
		out.printf("outboxd keeps serving until Ctrl-C:\n")
	}
	out.printf("  River UI  %s/riverui/\n", base)
	out.printf("  metrics   %s/metrics\n", base)
	out.printf("  API       %s/v1/intents\n", base)
	if s.email.key != "" {
		auth := ""
		if de.token != "" {
			auth = `-H "Authorization: Bearer $TOKEN" `
		}
		out.printf("  Resolve the unknown email once you have checked the mailbox:\n")
		out.printf("    curl -X POST %s%s/v1/intents/%s/resolve -d '{\"outcome\": \"succeeded\", \"note\": \"in the mailbox\"}'\n",
			auth, base, url.PathEscape(s.email.key))
	}
	if !*exit {
		<-ctx.Done()
		out.printf("\nstopping\n")
	}
	if failed > 0 {
		return &exitError{code: ExitFailure}
	}
	return nil
}

// demoEnv is what the demo runs: a database, the sandbox's providers, and
// outboxd's dispatcher and HTTP server.
type demoEnv struct {
	baseURL   string
	client    *outbox.Client
	daemon    *daemon.Daemon
	namespace string
	pool      *pgxpool.Pool
	sandbox   *sandbox.Sandbox
	// refreshGauges reads the database gauges at once, so that /metrics
	// shows the story's end as soon as it is told.
	refreshGauges func(context.Context) error
	// token is the API bearer token the demo's agent sends, when
	// OUTBOX_API_TOKENS is set.
	token string

	stops []func()
}

// stop stops what was started, last first.
func (e *demoEnv) stop() {
	for _, stop := range slices.Backward(e.stops) {
		stop()
	}
}

// startDemoEnv starts everything the story needs and says what it started.
// It returns the environment also on error, for stopping what did start.
func startDemoEnv(ctx context.Context, cfg *Config, logger *slog.Logger, out *demoOutput) (*demoEnv, error) {
	env := &demoEnv{namespace: outbox.NamespaceDefault}
	cfg.Schema = demoSchema
	dbLine := "DATABASE_URL " + redactDatabaseURL(cfg.DatabaseURL) + ", schema " + demoSchema
	if cfg.DatabaseURL == "" {
		done := out.progress("starting a throwaway PostgreSQL (initdb, pg_ctl)")
		cluster, err := pgcluster.Start(ctx, &pgcluster.Config{Logger: logger})
		done()
		if err != nil {
			return env, fmt.Errorf("error starting a throwaway PostgreSQL (set DATABASE_URL to use a database of yours): %w", err)
		}
		env.stops = append(env.stops, func() { _ = cluster.Stop(context.Background()) })
		cfg.DatabaseURL = cluster.URL()
		cfg.Schema = outbox.SchemaDefault
		u, _ := url.Parse(cluster.URL())
		dbLine = "a throwaway PostgreSQL on " + u.Host + ", removed on exit"
	}

	pool, err := connect(ctx, cfg, 20)
	if err != nil {
		return env, err
	}
	env.pool = pool
	env.stops = append(env.stops, pool.Close)
	done := out.progress("migrating schema " + cfg.Schema)
	migrator, err := migrations.New(pool, cfg.Schema)
	if err == nil {
		_, err = migrator.Up(ctx)
	}
	done()
	if err != nil {
		return env, err
	}

	sb, err := startSandbox(logger)
	if err != nil {
		return env, err
	}
	env.sandbox = sb
	env.stops = append(env.stops, sb.Close)
	// The provider effects only, pointed at the stand-ins: the demo has no
	// use for the noop effects.
	effectsCfg := *cfg
	effectsCfg.Sandbox = false
	registry, err := buildRegistry(&effectsCfg, pool, logger, sandboxSettings(&effectsCfg, sb.Stripe.URL(), sb.SMTP.Addr(),
		sb.Zendesk.URL(), sb.Webhooks.EndpointURL(sandboxWebhookEndpoint, true), sb.Webhooks.Secret()))
	if err != nil {
		return env, err
	}

	// Gauges refreshed every second: someone who opens /metrics after the
	// story should see it.
	dcfg := daemonConfig(cfg, registry, logger)
	dcfg.EffectTimeout = demoClientTimeout
	dcfg.GaugeRefreshInterval = time.Second
	dcfg.Workers = demoWorkers
	d, err := daemon.Start(ctx, pool, dcfg)
	if err != nil {
		return env, err
	}
	env.stops = append(env.stops, func() { _ = d.Stop(context.Background()) })
	env.client, env.daemon = d.Client, d
	env.refreshGauges = d.RefreshGauges
	env.token, env.namespace = demoToken(cfg.APITokens)
	env.baseURL = "http://" + d.Addr()

	tw := out.table()
	fmt.Fprintf(tw, "  database\t%s\n", dbLine)
	fmt.Fprintf(tw, "  providers\tthe sandbox's stand-ins on loopback: Stripe-like %s, SMTP sink %s, Zendesk-like %s\n",
		sb.Stripe.URL(), sb.SMTP.Addr(), sb.Zendesk.URL())
	fmt.Fprintf(tw, "  outboxd\tschema %s migrated, dispatcher running (OUTBOX_EFFECT_TIMEOUT=%s), HTTP on %s\n",
		cfg.Schema, demoClientTimeout, env.baseURL)
	tw.Flush() //nolint:errcheck // the writer's errors are its own
	return env, nil
}

// demoToken picks the bearer token the demo's agent sends when tokens are
// configured: namespace default's, else the first namespace's.
func demoToken(tokens map[string]string) (token, namespace string) {
	if len(tokens) == 0 {
		return "", outbox.NamespaceDefault
	}
	var all []string
	for t, ns := range tokens {
		if ns == outbox.NamespaceDefault {
			return t, ns
		}
		all = append(all, t)
	}
	slices.Sort(all)
	return all[0], tokens[all[0]]
}

// demoStory is one telling of the story, with what each part found.
type demoStory struct {
	env  *demoEnv
	out  *demoOutput
	http *http.Client
	// run makes this run's keys its own, so that a second demo on the same
	// database tells the same story.
	run string

	direct demoDirectLane
	outbox demoOutboxLane
	email  demoLost
	ticket demoLost
	checks []demoCheck
}

// demoDirectLane is the charge without outbox: the tool calls the provider.
type demoDirectLane struct {
	calls    [3]stripeAnswer
	late     stripeAnswer // call 1's answer, which came after the client gave up
	charges  int
	requests int
}

// demoOutboxLane is the charge with outbox: the tool records an intent.
type demoOutboxLane struct {
	key      string
	calls    [3]*apiAnswer
	final    *apiAnswer
	attempts int // River's attempts at the intent's job
	charges  int
	requests int
}

// demoLost is an effect whose outcome the demo makes the provider lose.
type demoLost struct {
	key      string
	calls    []*apiAnswer
	final    *apiAnswer
	effects  int
	requests int
}

type demoCheck struct {
	ok   bool
	what string
}

func (s *demoStory) check(ok bool, what string) { s.checks = append(s.checks, demoCheck{ok, what}) }

// tell runs the story and prints it as it goes.
func (s *demoStory) tell(ctx context.Context) error {
	s.out.printf("\n1. An agent charges a card: %s %s to customer %s\n", money(demoAmount), strings.ToUpper(demoCurrency), demoCustomer)
	s.out.printf("   Stripe is slow: it makes the charge, then answers after %s. Every client gives up\n", demoProviderDelay)
	s.out.printf("   after %s. The agent's framework retries the request; the model, which saw only\n", demoClientTimeout)
	s.out.printf("   errors, calls the tool again. The same three calls, two ways:\n\n")
	if err := s.chargeDirect(ctx); err != nil {
		return err
	}
	if err := s.chargeWithOutbox(ctx); err != nil {
		return err
	}
	s.printCharge()

	s.out.printf("\n2. Each guarantee, when a provider loses an outcome\n")
	if err := s.emailCrash(ctx); err != nil {
		return err
	}
	if err := s.ticketReconciled(ctx); err != nil {
		return err
	}
	s.out.printf("   charge  deduplicated: Stripe keeps each Idempotency-Key's answer for 24 h, so a lost\n")
	s.out.printf("           outcome is retried with the same provider key (part 1).\n")
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
		return "timed out after " + demoClientTimeout.String()
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
func (s *demoStory) chargeDirect(ctx context.Context) error {
	stripe := s.env.sandbox.Stripe
	first, second := "direct-"+s.run+"-req-1", "direct-"+s.run+"-req-2"
	stripe.MisbehaveFor(first, sandbox.Fault{Kind: sandbox.FaultSlow, Delay: demoProviderDelay})

	done := s.out.progress("without outbox: the tool calls Stripe directly")
	start := time.Now()
	late := s.postCharge(ctx, first, start)
	call := func(ch <-chan stripeAnswer) stripeAnswer {
		select {
		case a := <-ch:
			return a
		case <-time.After(demoClientTimeout):
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
		case <-time.After(demoWaitMax):
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
func (s *demoStory) postCharge(ctx context.Context, key string, start time.Time) <-chan stripeAnswer {
	ch := make(chan stripeAnswer, 1)
	go func() {
		form := url.Values{
			"amount":         {strconv.Itoa(demoAmount)},
			"confirm":        {"true"},
			"currency":       {demoCurrency},
			"customer":       {demoCustomer},
			"payment_method": {demoPaymentMethod},
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.env.sandbox.Stripe.URL()+"/v1/payment_intents", strings.NewReader(form.Encode()))
		if err != nil {
			ch <- stripeAnswer{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+sandboxStripeKey)
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
func (s *demoStory) chargeWithOutbox(ctx context.Context) error {
	lane := &s.outbox
	lane.key = "demo-" + s.run + "-order-1001-charge"
	providerKey := outbox.ProviderKey(s.env.namespace, lane.key)
	stripe := s.env.sandbox.Stripe
	stripe.MisbehaveFor(providerKey, sandbox.Fault{Kind: sandbox.FaultSlow, Delay: demoProviderDelay})
	args := map[string]any{
		"amount": demoAmount, "currency": demoCurrency, "customer": demoCustomer,
		"payment_method": demoPaymentMethod, "description": "order 1001",
	}

	done := s.out.progress("with outbox: the tool records an intent, and outbox's worker calls Stripe")
	defer done()
	for i := range lane.calls {
		a, err := s.enqueue(ctx, lane.key, "charge", args)
		if err != nil {
			return err
		}
		if i == 0 && a.Intent != nil && !a.Intent.State.Terminal() {
			// The tool waits for the outcome as long as the client would.
			if w, err := s.get(ctx, lane.key, demoClientTimeout); err == nil {
				a.Intent = w.Intent
			}
		}
		lane.calls[i] = a
	}
	final, err := s.get(ctx, lane.key, demoWaitMax)
	if err != nil {
		return err
	}
	lane.final = final
	if intent, err := s.env.client.Get(ctx, s.env.namespace, lane.key); err == nil && intent.JobID != nil {
		if job, err := s.env.daemon.Dispatcher.River().JobGet(ctx, *intent.JobID); err == nil {
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
func (s *demoStory) printCharge() {
	d, o := &s.direct, &s.outbox
	tw := s.out.table()
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
	s.out.printf("\n   Without outbox, Stripe's Idempotency-Key covered the retried request, but the\n")
	s.out.printf("   model's new call was a new request: a second charge. With outbox, the three calls\n")
	s.out.printf("   carried one key naming the action: one intent, one River job, one charge. Its first\n")
	s.out.printf("   attempt timed out too; River retried it with the same provider key, and Stripe\n")
	s.out.printf("   answered from its memory instead of charging again.\n")
}

// emailCrash sends a receipt whose SMTP server keeps the message and drops
// the connection before its final reply: the worker cannot know whether
// the email went out.
func (s *demoStory) emailCrash(ctx context.Context) error {
	lost := &s.email
	lost.key = "demo-" + s.run + "-order-1001-receipt"
	providerKey := outbox.ProviderKey(s.env.namespace, lost.key)
	sink := s.env.sandbox.SMTP
	// The sink knows a message by its Message-ID, derived from the
	// provider key.
	sink.MisbehaveFor(providerKey, sandbox.Fault{Kind: sandbox.FaultReset})
	args := map[string]any{
		"to":      []string{"ada@example.com"},
		"subject": "Your receipt for order 1001",
		"text":    "Thank you for your order. We charged your card 19.99 EUR.",
	}
	done := s.out.progress("email: the mail server crashes mid-send")
	first, err := s.enqueue(ctx, lost.key, "email", args)
	if err != nil {
		done()
		return err
	}
	final, err := s.get(ctx, lost.key, demoWaitMax)
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
	lost.effects, lost.requests = sink.EffectsFor(providerKey), sink.RequestsFor(providerKey)

	s.out.printf("   email   at_most_once: SMTP can neither dedupe nor be asked whether a message went out.\n")
	s.out.printf("           The mail server takes the receipt, then crashes before it answers.\n")
	s.out.printf("           -> %s; %s in the mailbox; the agent's retry: %s.\n",
		final.stateLine(), plural(lost.effects, "email"), again.summary(false))
	s.out.printf("           outbox does not guess and never sends it again: an operator checks and resolves it.\n")
	s.check(final.Intent != nil && final.Intent.State == outbox.StateUnknown && lost.effects == 1 && lost.requests == 1 &&
		again.Duplicate && again.Intent.State == outbox.StateUnknown,
		"the email whose server crashed mid-send ended unknown, sent once and never again")
	return nil
}

// ticketReconciled opens a ticket whose API creates it and then answers 500:
// the worker waits for the attempt's lease to end, then asks Zendesk by
// external_id.
func (s *demoStory) ticketReconciled(ctx context.Context) error {
	lost := &s.ticket
	lost.key = "demo-" + s.run + "-order-1001-ticket"
	providerKey := outbox.ProviderKey(s.env.namespace, lost.key)
	zendesk := s.env.sandbox.Zendesk
	zendesk.MisbehaveFor(providerKey, sandbox.Fault{Kind: sandbox.FaultServerError})
	args := map[string]any{
		"subject":  "Order 1001: customer asks for an invoice",
		"body":     "Please send an invoice for order 1001.",
		"priority": "normal",
	}
	done := s.out.progress("ticket: the ticket API answers 500 after creating the ticket")
	first, err := s.enqueue(ctx, lost.key, "ticket", args)
	if err != nil {
		done()
		return err
	}
	final, err := s.get(ctx, lost.key, demoWaitMax)
	done()
	if err != nil {
		return err
	}
	lost.calls, lost.final = []*apiAnswer{first}, final
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
	s.out.printf("   ticket  reconcilable: Zendesk finds a ticket by its external_id, the provider key.\n")
	s.out.printf("           The ticket API creates the ticket, then answers 500.\n")
	s.out.printf("           -> once the attempt's lease (%s) ended, looked up: found ticket %d; %s;\n",
		2*demoClientTimeout, result.TicketID, final.stateLine())
	s.out.printf("              %s created, by %s.\n", plural(lost.effects, "ticket"), plural(lost.requests, "request"))
	s.check(final.Intent != nil && final.Intent.State == outbox.StateSucceeded && lost.effects == 1 && lost.requests == 1 && found,
		"the ticket was reconciled by look-up: succeeded with the ticket created once")
	return nil
}

// printSummary prints the table of calls made against effects performed.
func (s *demoStory) printSummary() {
	s.out.printf("\n3. Calls made, against effects performed\n")
	tw := s.out.table()
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

// printChecks prints every check and returns how many failed.
func (s *demoStory) printChecks() int {
	s.out.printf("\nChecks\n")
	failed := 0
	for _, c := range s.checks {
		mark := "ok    "
		if !c.ok {
			mark = "FAILED"
			failed++
		}
		s.out.printf("   %s %s\n", mark, c.what)
	}
	if failed == 0 {
		s.out.printf("Every check held.\n")
	} else {
		s.out.printf("%d of %d checks failed.\n", failed, len(s.checks))
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
		return fmt.Sprintf("%d intent %d recorded; %s after %s", a.status, a.Intent.ID, a.Intent.State, demoClientTimeout)
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
func (s *demoStory) enqueue(ctx context.Context, key, effect string, args any) (*apiAnswer, error) {
	body, err := json.Marshal(map[string]any{"effect": effect, "args": args, "requested_by": "demo-agent"})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.env.baseURL+"/v1/intents", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return s.api(req)
}

// get reads the intent, waiting up to wait for it to be terminal.
func (s *demoStory) get(ctx context.Context, key string, wait time.Duration) (*apiAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		s.env.baseURL+"/v1/intents/"+url.PathEscape(key)+"?wait="+wait.String(), nil)
	if err != nil {
		return nil, err
	}
	return s.api(req)
}

func (s *demoStory) api(req *http.Request) (*apiAnswer, error) {
	if s.env.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.env.token)
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

// demoOutput is where the demo writes, and its progress line.
type demoOutput struct {
	w   io.Writer
	tty bool
}

func (o *demoOutput) printf(format string, args ...any) { fmt.Fprintf(o.w, format, args...) }

func (o *demoOutput) table() *tabwriter.Writer { return tabwriter.NewWriter(o.w, 0, 0, 2, ' ', 0) }

// progress shows what the demo is doing until done is called: on a
// terminal, one line rewritten in place with the time elapsed, erased at the
// end; elsewhere, the line once.
func (o *demoOutput) progress(what string) (done func()) {
	if !o.tty {
		o.printf("   ... %s\n", what)
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

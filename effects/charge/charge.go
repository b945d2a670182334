package charge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/internal/argcheck"
	"github.com/outbox-dev/outbox/effects/internal/httpsend"
)

// Name is the effect's name.
const Name = "charge"

// URLDefault is Stripe's API.
const URLDefault = "https://api.stripe.com"

// DedupeWindow is how long Stripe keeps an Idempotency-Key.
const DedupeWindow = 24 * time.Hour

// Config configures the charge effect.
type Config struct {
	// APIKey is the Stripe secret key, sent as a bearer token. Required.
	APIKey string

	// HTTPClient sends the requests; its transport is wrapped to see
	// whether a request was written out in full. It should not follow
	// redirects. Defaults to a client that keeps up to 50 idle connections
	// and follows no redirect.
	HTTPClient *http.Client

	// Logger receives the error logged for an idempotency_error. Defaults to
	// a logger that discards.
	Logger *slog.Logger

	// URL is the base URL of Stripe's API. Defaults to URLDefault.
	URL string
}

// Effect is the charge effect. It is safe for concurrent use.
type Effect struct {
	client *stripe.Client
	logger *slog.Logger
}

// The capabilities Effect has: the build breaks if a method drifts from
// its interface.
var (
	_ effects.Effect         = (*Effect)(nil)
	_ effects.ArgsSchemaer   = (*Effect)(nil)
	_ effects.DedupeWindower = (*Effect)(nil)
)

// New returns the charge effect.
func New(config *Config) (*Effect, error) {
	if config == nil || config.APIKey == "" {
		return nil, errors.New("charge: APIKey must be set")
	}
	url := config.URL
	if url == "" {
		url = URLDefault
	}
	httpClient := httpsend.NewClient(50)
	if config.HTTPClient != nil {
		httpClient = httpsend.Wrap(config.HTTPClient)
	}
	logger := config.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		HTTPClient: httpClient,
		// stripe-go logs every request, and errors with their full body, to
		// stderr by default; the worker logs outcomes itself.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
		// No retries inside stripe-go. River is the one retry loop: each of
		// its attempts is recorded in the intent (whether it may have reached
		// Stripe, which error it met), is bounded by the attempt's deadline
		// (dispatcher.Config.EffectTimeout, the ctx given to Execute), backs
		// off across process restarts, and stops at
		// dispatcher.Config.MaxAttempts or at the end of
		// Stripe's 24 h window. stripe-go's own retries would sleep inside
		// that deadline (a 409 retried in-process eats the attempt's time and
		// ends as a timeout, which is ambiguous, instead of a prompt "not
		// sent"), and would hide from the intent the attempts it made. They
		// would be safe, since they reuse our Idempotency-Key, just opaque.
		MaxNetworkRetries: stripe.Int64(0),
		URL:               stripe.String(strings.TrimRight(url, "/")),
	})
	return &Effect{
		client: stripe.NewClient(config.APIKey, stripe.WithBackends(backends)),
		logger: logger,
	}, nil
}

// Name implements effects.Effect.
func (e *Effect) Name() string { return Name }

// Guarantee implements effects.Effect.
func (e *Effect) Guarantee() effects.Guarantee { return effects.GuaranteeDeduplicated }

// DedupeWindow implements effects.DedupeWindower.
func (e *Effect) DedupeWindow() time.Duration { return DedupeWindow }

// Args are the charge's arguments.
type Args struct {
	// Amount is in the currency's minor unit (cents), more than 0. Required.
	Amount int64
	// Currency is a three-letter ISO 4217 code, sent in lower case. Required.
	Currency string
	// Customer is the Stripe customer id (cus_...). Required.
	Customer string
	// Description is shown in Stripe's dashboard. Optional.
	Description string
	// PaymentMethod is the Stripe payment method id (pm_...). Optional.
	PaymentMethod string
}

type rawArgs struct {
	Amount        json.RawMessage `json:"amount"`
	Currency      *string         `json:"currency"`
	Customer      *string         `json:"customer"`
	Description   *string         `json:"description"`
	PaymentMethod *string         `json:"payment_method"`
}

var currencyRE = regexp.MustCompile(`^[A-Za-z]{3}$`)

// Limits of the string arguments, Stripe's own or close to them.
const (
	idMax          = 255
	descriptionMax = 1000
)

// argsSchema is ParseArgs' rules as a JSON Schema, with its limits.
var argsSchema = fmt.Sprintf(`{
	"type": "object",
	"properties": {
		"customer": {"type": "string", "minLength": 1, "maxLength": %[1]d, "description": "The Stripe customer id, such as cus_123."},
		"amount": {"type": "integer", "minimum": 1, "description": "The amount in the currency's minor unit (cents for eur and usd): 1999 is 19.99."},
		"currency": {"type": "string", "pattern": %[3]q, "description": "The ISO 4217 currency code, three letters, such as eur."},
		"payment_method": {"type": "string", "minLength": 1, "maxLength": %[1]d, "description": "The Stripe payment method id, such as pm_card_visa. Defaults to the customer's default payment method."},
		"description": {"type": "string", "maxLength": %[2]d, "description": "A description shown to the customer and in the Stripe dashboard."}
	},
	"required": ["customer", "amount", "currency"],
	"additionalProperties": false
}`, idMax, descriptionMax, currencyRE.String())

// ArgsSchema returns the JSON Schema of a charge's arguments: what
// ParseArgs checks, as far as a schema can say it.
func ArgsSchema() json.RawMessage { return json.RawMessage(argsSchema) }

// ArgsSchema implements effects.ArgsSchemaer.
func (e *Effect) ArgsSchema() json.RawMessage { return ArgsSchema() }

// ParseArgs validates a charge's arguments.
func ParseArgs(args json.RawMessage) (*Args, error) {
	var raw rawArgs
	if err := argcheck.Object(args, &raw); err != nil {
		return nil, err
	}
	if raw.Amount == nil || string(raw.Amount) == "null" {
		return nil, &effects.ArgError{Field: "amount", Message: "is required"}
	}
	amount, err := argcheck.Integer("amount", raw.Amount)
	if err != nil {
		return nil, err
	}
	if amount <= 0 {
		return nil, &effects.ArgError{Field: "amount", Message: "must be more than 0 (in the currency's minor unit)"}
	}
	if raw.Currency == nil {
		return nil, &effects.ArgError{Field: "currency", Message: "is required"}
	}
	if !currencyRE.MatchString(*raw.Currency) {
		return nil, &effects.ArgError{Field: "currency", Message: "must be a three-letter ISO 4217 code such as usd"}
	}
	if err := argcheck.Text("customer", raw.Customer, true, idMax, true); err != nil {
		return nil, err
	}
	if err := argcheck.Text("description", raw.Description, false, descriptionMax, false); err != nil {
		return nil, err
	}
	if err := argcheck.Text("payment_method", raw.PaymentMethod, false, idMax, true); err != nil {
		return nil, err
	}
	a := &Args{Amount: amount, Currency: strings.ToLower(*raw.Currency), Customer: *raw.Customer}
	if raw.Description != nil {
		a.Description = *raw.Description
	}
	if raw.PaymentMethod != nil {
		a.PaymentMethod = *raw.PaymentMethod
	}
	return a, nil
}

// ValidateArgs implements effects.Effect.
func (e *Effect) ValidateArgs(args json.RawMessage) error {
	_, err := ParseArgs(args)
	return err
}

// Result is the charge's result, stored in the intent.
type Result struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	LatestCharge  string `json:"latest_charge,omitempty"`
	PaymentIntent string `json:"payment_intent"`
	// Replayed is true when Stripe answered with the stored answer of an
	// earlier request with the same key (header Idempotent-Replayed).
	Replayed bool   `json:"replayed"`
	Status   string `json:"status"`
}

// Execute implements effects.Effect: one confirmed PaymentIntent.
func (e *Effect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	args, err := ParseArgs(req.Args)
	if err != nil {
		return nil, effects.Permanent(effects.CodeInvalidArgs, err)
	}
	params := &stripe.PaymentIntentCreateParams{
		Amount:   stripe.Int64(args.Amount),
		Currency: stripe.String(args.Currency),
		Customer: stripe.String(args.Customer),
		Confirm:  stripe.Bool(true),
		// A server-side charge has nobody to send through a redirect or a
		// 3-D Secure challenge: such payment methods are not offered, and a
		// card that asks for authentication fails (a card error) instead of
		// leaving a PaymentIntent waiting for an action nobody will take.
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled:        stripe.Bool(true),
			AllowRedirects: stripe.String("never"),
		},
		ErrorOnRequiresAction: stripe.Bool(true),
	}
	if args.Description != "" {
		params.Description = stripe.String(args.Description)
	}
	if args.PaymentMethod != "" {
		params.PaymentMethod = stripe.String(args.PaymentMethod)
	}
	params.SetIdempotencyKey(req.ProviderKey)

	ctx, probe := httpsend.WithProbe(httpsend.WithURLTemplate(ctx, "/v1/payment_intents"))
	pi, err := e.client.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		return nil, e.classify(ctx, req, err, probe)
	}
	res := Result{
		Amount:        pi.Amount,
		Currency:      string(pi.Currency),
		PaymentIntent: pi.ID,
		Status:        string(pi.Status),
	}
	if pi.LatestCharge != nil {
		res.LatestCharge = pi.LatestCharge.ID
	}
	if pi.LastResponse != nil {
		res.Replayed = pi.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	}
	return json.Marshal(res)
}

// classify turns stripe-go's error into an effect error. Messages are built
// from Stripe's code, type and message only: stripe-go's own Error() is the
// whole error as JSON, which can hold a PaymentIntent's client secret.
func (e *Effect) classify(ctx context.Context, req *effects.Request, err error, probe *httpsend.Probe) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		status := probe.Status()
		switch {
		case status == 0:
			// No answer: the request failed on the way, or its answer did.
			return httpsend.TransportError(err, probe, "stripe")
		case status >= 200 && status < 300:
			return effects.Ambiguous("unreadable_answer", fmt.Errorf("stripe: answered %d with a body that could not be read as a PaymentIntent", status))
		}
		return statusClass(status, "", fmt.Errorf("stripe: answered %d with a body that is not a Stripe error", status))
	}
	msg := describe(se)
	switch {
	case se.HTTPStatusCode == http.StatusConflict || se.HTTPStatusCode == http.StatusTooManyRequests:
		// Checked first: a 409 for a key in use is not an idempotency_error
		// of the permanent kind, whatever type it is given.
		return statusClass(se.HTTPStatusCode, string(se.Code), msg)
	case se.Type == stripe.ErrorTypeCard || se.HTTPStatusCode == http.StatusPaymentRequired:
		code := string(se.Code)
		if code == "" {
			code = "card_error"
		}
		return effects.Permanent(code, msg)
	case se.Type == stripe.ErrorTypeIdempotency:
		e.logger.ErrorContext(ctx, "Stripe refused a reused Idempotency-Key with other parameters: provider keys are derived from the intent, so their derivation is broken",
			slog.Int64("intent_id", req.IntentID), slog.String("stripe_request_id", se.RequestID))
		return effects.Permanent("idempotency_error", msg)
	}
	return statusClass(se.HTTPStatusCode, string(se.Code), msg)
}

func statusClass(status int, code string, err error) error {
	orCode := func(def string) string {
		if code != "" {
			return code
		}
		return def
	}
	switch {
	case status == http.StatusConflict:
		return effects.NotSent(orCode("idempotency_key_in_use"), err)
	case status == http.StatusTooManyRequests:
		return effects.NotSent(orCode("rate_limited"), err)
	case status >= 500:
		// Stripe stores a 500 against the key and replays it to retries, so
		// a retry may well get this answer again: the intent then ends
		// unknown once attempts run out.
		return effects.Ambiguous(orCode("stripe_server_error"), err)
	case status >= 400:
		return effects.Permanent(orCode(fmt.Sprintf("stripe_%d", status)), err)
	}
	return effects.Ambiguous(orCode("unexpected_status"), err)
}

func describe(se *stripe.Error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "stripe: %d %s", se.HTTPStatusCode, se.Type)
	if se.Code != "" {
		fmt.Fprintf(&b, " %s", se.Code)
	}
	if se.DeclineCode != "" {
		fmt.Fprintf(&b, " (decline_code %s)", se.DeclineCode)
	}
	if se.PaymentIntent != nil && se.PaymentIntent.ID != "" {
		fmt.Fprintf(&b, " (payment_intent %s)", se.PaymentIntent.ID)
	}
	if se.Param != "" {
		fmt.Fprintf(&b, " (param %s)", se.Param)
	}
	if se.Msg != "" {
		fmt.Fprintf(&b, ": %s", httpsend.Truncate(se.Msg, 300))
	}
	if se.RequestID != "" {
		fmt.Fprintf(&b, " (request %s)", se.RequestID)
	}
	return errors.New(b.String())
}

package sandbox

import (
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// StripeIdempotencyWindow is how long the Stripe stand-in keeps a key, as
// Stripe does.
const StripeIdempotencyWindow = 24 * time.Hour

// Stripe's test payment methods that the stand-in knows.
const (
	// PaymentMethodDeclined is declined with 402 card_declined
	// (decline_code generic_decline).
	PaymentMethodDeclined = "pm_card_chargeDeclined"
	// PaymentMethodVisa succeeds, like any other payment method.
	PaymentMethodVisa = "pm_card_visa"
)

// StripeConfig configures the Stripe stand-in.
type StripeConfig struct {
	// APIKey is the only bearer token accepted. Defaults to any non-empty.
	APIKey string
	// Logger receives the stand-in's notes. Defaults to a logger that
	// discards.
	Logger *slog.Logger
}

// Stripe is a Stripe-like server for POST /v1/payment_intents, honouring
// Idempotency-Key as Stripe documents it: the first answer for a key is kept
// for 24 hours and replayed, with Idempotent-Replayed: true, to every later
// request with that key (a stored 402 or 500 included); a key that comes back
// with other parameters gets 400 idempotency_error; and while the first
// request with a key is still running, others get 409
// idempotency_key_in_use. Requests refused before they ran (429, 503, a
// validation error) keep nothing. Effects counts PaymentIntents that
// succeeded: charges.
type Stripe struct {
	*standIn
	apiKey string
	http   *httpServer

	mu      sync.Mutex
	keys    map[string]*stripeKey
	charges []string
	now     func() time.Time
}

// stripeKey is what the stand-in keeps for one Idempotency-Key.
type stripeKey struct {
	at      time.Time
	body    []byte
	params  string
	running bool
	status  int
}

// NewStripe starts the Stripe stand-in on a loopback port.
func NewStripe(config *StripeConfig) (*Stripe, error) {
	if config == nil {
		config = &StripeConfig{}
	}
	s := &Stripe{
		standIn: newStandIn("stripe", config.Logger),
		apiKey:  config.APIKey,
		keys:    make(map[string]*stripeKey),
		now:     time.Now,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payment_intents", s.createPaymentIntent)
	h, err := startHTTP(s.standIn, mux)
	if err != nil {
		return nil, err
	}
	s.http = h
	return s, nil
}

// URL is the stand-in's base URL, for OUTBOX_STRIPE_URL.
func (s *Stripe) URL() string { return s.http.url }

// Close stops the stand-in.
func (s *Stripe) Close() { s.http.close(s.standIn) }

// Charges returns the ids of the PaymentIntents that succeeded, in order.
func (s *Stripe) Charges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.charges...)
}

func stripeError(status int, typ, code, msg string, extra map[string]any) []byte {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	for k, v := range extra {
		e[k] = v
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	return b
}

func (s *Stripe) createPaymentIntent(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	s.countRequest(key)
	w.Header().Set("Request-Id", "req_"+randomID(14))
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || auth == "" || (s.apiKey != "" && auth != s.apiKey) {
		writeRaw(w, http.StatusUnauthorized, stripeError(401, "invalid_request_error", "", "Invalid API Key provided.", nil))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		writeRaw(w, http.StatusBadRequest, stripeError(400, "invalid_request_error", "", "Invalid request body.", nil))
		return
	}
	params := r.PostForm.Encode() // sorted by key: equal parameters, equal strings

	var entry *stripeKey
	if key != "" {
		s.mu.Lock()
		prev, found := s.keys[key]
		if found && s.now().Sub(prev.at) > StripeIdempotencyWindow {
			found = false
		}
		switch {
		case found && prev.running:
			s.mu.Unlock()
			writeRaw(w, http.StatusConflict, stripeError(409, "invalid_request_error", "idempotency_key_in_use",
				"There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): "+key+". Please try again later.", nil))
			return
		case found && prev.params != params:
			s.mu.Unlock()
			writeRaw(w, http.StatusBadRequest, stripeError(400, "idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '"+key+"' if you meant to execute a different request.", nil))
			return
		case found:
			status, body := prev.status, prev.body
			s.mu.Unlock()
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Original-Request", "req_replayed")
			writeRaw(w, status, body)
			return
		}
		entry = &stripeKey{at: s.now(), params: params, running: true}
		s.keys[key] = entry
		s.mu.Unlock()
	}
	// forget drops the key: a request refused before it ran keeps nothing.
	forget := func() {
		if entry != nil {
			s.mu.Lock()
			delete(s.keys, key)
			s.mu.Unlock()
		}
	}
	// keep stores the answer for replays, once the request is over.
	keep := func(status int, body []byte) {
		if entry != nil {
			s.mu.Lock()
			entry.status, entry.body, entry.running = status, body, false
			s.mu.Unlock()
		}
	}

	fault, faulty := s.nextFault(key, true)
	if faulty {
		switch fault.Kind {
		case FaultTooManyRequests:
			forget()
			writeRaw(w, http.StatusTooManyRequests, stripeError(429, "invalid_request_error", "rate_limit", "Too many requests hit the API too quickly.", nil))
			return
		case FaultUnavailable:
			forget()
			writeRaw(w, http.StatusServiceUnavailable, stripeError(503, "api_error", "", "Stripe is temporarily unavailable.", nil))
			return
		case FaultReject:
			forget()
			writeRaw(w, http.StatusBadRequest, stripeError(400, "invalid_request_error", "parameter_invalid_empty", "Told to refuse by the sandbox.", nil))
			return
		case FaultHangBefore:
			s.hang(key, r.Context().Done(), hangMax, true)
			forget()
			return
		}
	}

	status, body := s.perform(r, key)
	if status >= 400 && status != http.StatusPaymentRequired {
		// A validation error: Stripe keeps nothing for it.
		forget()
		writeRaw(w, status, body)
		return
	}
	if !faulty {
		keep(status, body)
		writeRaw(w, status, body)
		return
	}
	switch fault.Kind {
	case FaultServerError:
		// Stripe keeps a 500 against the key and replays it.
		status, body = http.StatusInternalServerError, stripeError(500, "api_error", "", "An unknown error occurred.", nil)
		keep(status, body)
		writeRaw(w, status, body)
	case FaultReset:
		keep(status, body)
		resetConnection(w)
	case FaultSlow:
		// The key stays in use until the answer is written, as at Stripe.
		s.hang(key, r.Context().Done(), fault.delay(), false)
		keep(status, body)
		writeRaw(w, status, body)
	case FaultHangAfter:
		s.hang(key, r.Context().Done(), hangMax, true)
		keep(status, body)
		writeRaw(w, status, body)
	}
}

// perform creates the PaymentIntent: the effect.
func (s *Stripe) perform(r *http.Request, key string) (int, []byte) {
	f := r.PostForm
	for _, p := range []string{"amount", "currency"} {
		if f.Get(p) == "" {
			return http.StatusBadRequest, stripeError(400, "invalid_request_error", "parameter_missing", "Missing required param: "+p+".", map[string]any{"param": p})
		}
	}
	amount, err := strconv.ParseInt(f.Get("amount"), 10, 64)
	if err != nil || amount <= 0 {
		return http.StatusBadRequest, stripeError(400, "invalid_request_error", "parameter_invalid_integer", "Invalid integer: amount.", map[string]any{"param": "amount"})
	}
	if len(f.Get("currency")) != 3 {
		return http.StatusBadRequest, stripeError(400, "invalid_request_error", "parameter_invalid_empty", "Invalid currency.", map[string]any{"param": "currency"})
	}
	id := "pi_" + randomID(24)
	pi := map[string]any{
		"id":             id,
		"object":         "payment_intent",
		"amount":         amount,
		"currency":       strings.ToLower(f.Get("currency")),
		"customer":       nilIfEmpty(f.Get("customer")),
		"description":    nilIfEmpty(f.Get("description")),
		"payment_method": nilIfEmpty(f.Get("payment_method")),
		"created":        s.now().Unix(),
		"livemode":       false,
		"client_secret":  id + "_secret_" + randomID(24),
	}
	if f.Get("payment_method") == PaymentMethodDeclined {
		pi["status"] = "requires_payment_method"
		pi["latest_charge"] = "ch_" + randomID(24)
		return http.StatusPaymentRequired, stripeError(402, "card_error", "card_declined", "Your card was declined.",
			map[string]any{"decline_code": "generic_decline", "payment_intent": pi})
	}
	if f.Get("confirm") == "true" {
		pi["status"] = "succeeded"
		pi["amount_received"] = amount
		pi["latest_charge"] = "ch_" + randomID(24)
	} else {
		pi["status"] = "requires_confirmation"
	}
	b, _ := json.Marshal(pi)
	if pi["status"] == "succeeded" {
		s.mu.Lock()
		s.charges = append(s.charges, id)
		s.mu.Unlock()
		s.countEffect(key)
	}
	return http.StatusOK, b
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

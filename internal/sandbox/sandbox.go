package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// FaultKind is a way a stand-in misbehaves on one effect request.
type FaultKind string

const (
	// FaultTooManyRequests answers 429 (SMTP: 421) before performing.
	FaultTooManyRequests FaultKind = "too_many_requests"
	// FaultUnavailable answers 503 (SMTP: 421) before performing.
	FaultUnavailable FaultKind = "unavailable"
	// FaultReject refuses the request definitively before performing: 400
	// (Stripe), 422 (Zendesk), 400 (webhook), 550 to RCPT (SMTP).
	FaultReject FaultKind = "reject"
	// FaultHangBefore holds the request, without performing it, until the
	// client goes away.
	FaultHangBefore FaultKind = "hang_before"
	// FaultHeldBefore holds the request, without performing it, until the
	// test calls Release for its key, even if the client went away
	// meanwhile (as a provider that works from a queue would); then it
	// performs the effect and answers. Zendesk only.
	FaultHeldBefore FaultKind = "held_before"

	// FaultServerError performs the effect, then answers 500. The SMTP sink
	// resets the connection instead: an SMTP server does not answer a failure
	// for a message it kept.
	FaultServerError FaultKind = "server_error"
	// FaultReset performs the effect, then resets the connection without an
	// answer.
	FaultReset FaultKind = "reset"
	// FaultSlow performs the effect, then answers after Fault.Delay, or when
	// the client went away if sooner.
	FaultSlow FaultKind = "slow"
	// FaultHangAfter performs the effect, then holds the answer until the
	// client goes away.
	FaultHangAfter FaultKind = "hang_after"
)

// SlowDelayDefault is FaultSlow's delay when Fault.Delay is 0.
const SlowDelayDefault = 5 * time.Second

// hangMax bounds a hang whose client never goes away.
const hangMax = 5 * time.Minute

// Fault is one misbehaviour.
type Fault struct {
	// Kind is what happens.
	Kind FaultKind `json:"kind"`
	// Delay is FaultSlow's delay. Defaults to SlowDelayDefault.
	Delay time.Duration `json:"-"`
}

func (f Fault) valid() bool {
	switch f.Kind {
	case FaultTooManyRequests, FaultUnavailable, FaultReject, FaultHangBefore, FaultHeldBefore,
		FaultServerError, FaultReset, FaultSlow, FaultHangAfter:
		return true
	}
	return false
}

func (f Fault) delay() time.Duration {
	if f.Delay > 0 {
		return f.Delay
	}
	return SlowDelayDefault
}

// standIn is what every stand-in shares: its fault queues and its counts.
//
// A request's key is what the provider knows the action by, the intent's
// provider key: Stripe's Idempotency-Key, Zendesk's external_id, the
// webhook-id, and for SMTP the Message-ID's part before the "@" (outbox
// derives Message-IDs from provider keys).
type standIn struct {
	logger *slog.Logger
	name   string

	closeOnce sync.Once
	closing   chan struct{}

	mu          sync.Mutex
	effects     int
	effectsBy   map[string]int
	faults      []Fault
	faultsBy    map[string][]Fault
	hung        map[string]int
	hungChanged chan struct{}
	released    map[string]chan struct{}
	requests    int
	requestsBy  map[string]int
	// throttledUntil is when Throttle's 429s end.
	throttledUntil time.Time
	// hangingNow counts the requests hanging for a fault at this moment,
	// by key (hung counts every one ever).
	hangingNow map[string]int
}

func newStandIn(name string, logger *slog.Logger) *standIn {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &standIn{
		logger:      logger,
		name:        name,
		closing:     make(chan struct{}),
		effectsBy:   map[string]int{},
		faultsBy:    map[string][]Fault{},
		hung:        map[string]int{},
		hangingNow:  map[string]int{},
		hungChanged: make(chan struct{}),
		released:    map[string]chan struct{}{},
		requestsBy:  map[string]int{},
	}
}

// Release lets the requests with key that FaultHeldBefore holds, and any
// that come later, go on.
func (s *standIn) Release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.releasedLocked(key)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (s *standIn) releasedLocked(key string) chan struct{} {
	ch, ok := s.released[key]
	if !ok {
		ch = make(chan struct{})
		s.released[key] = ch
	}
	return ch
}

// hold blocks a request with key until Release(key), announcing it to
// WaitHanging; it reports false when the stand-in closed first.
func (s *standIn) hold(key string) bool {
	s.mu.Lock()
	ch := s.releasedLocked(key)
	s.hung[key]++
	if key != "" {
		s.hung[""]++
	}
	close(s.hungChanged)
	s.hungChanged = make(chan struct{})
	s.mu.Unlock()
	s.logger.Info("sandbox provider holding a request", slog.String("provider", s.name))
	select {
	case <-ch:
		return true
	case <-s.closing:
		return false
	}
}

// Misbehave queues faults: the next effect requests meet them, one each, in
// order. Requests answered from a stand-in's memory (a replayed Stripe key, a
// duplicate webhook) and look-ups take none.
func (s *standIn) Misbehave(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// Throttle makes every effect request until d from now meet
// FaultTooManyRequests (429 with Retry-After, SMTP 421), after the faults
// queued for its key, as a provider does that throttles an account for
// minutes; Throttle(0) lifts it.
func (s *standIn) Throttle(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttledUntil = time.Now().Add(d)
}

// MisbehaveFor queues faults for the effect requests with key only, ahead
// of those queued by Misbehave: so that concurrent tests sharing a stand-in
// each get their own.
func (s *standIn) MisbehaveFor(key string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultsBy[key] = append(s.faultsBy[key], faults...)
}

// Effects returns how many effects the stand-in performed.
func (s *standIn) Effects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects
}

// EffectsFor returns how many effects the stand-in performed for key.
func (s *standIn) EffectsFor(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effectsBy[key]
}

// Requests returns how many effect requests the stand-in received, whatever
// became of them (look-ups and /_sandbox/ calls are not counted).
func (s *standIn) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// RequestsFor returns how many effect requests with key the stand-in
// received.
func (s *standIn) RequestsFor(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requestsBy[key]
}

// HangingNow returns the keys of the requests hanging for a fault
// (FaultHangBefore, FaultHangAfter) at this moment, "" for a request whose
// key the stand-in does not know yet: a test times a kill of the client to
// a call in flight with it.
func (s *standIn) HangingNow() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.hangingNow))
	for k := range s.hangingNow {
		keys = append(keys, k)
	}
	return keys
}

// WaitHanging waits until a request with key (any request when key is "")
// hangs (FaultHangBefore or FaultHangAfter), so that a test can kill the
// client at that point.
func (s *standIn) WaitHanging(ctx context.Context, key string) error {
	for {
		s.mu.Lock()
		n := s.hung[key]
		changed := s.hungChanged
		s.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s: no request with key %q hung: %w", s.name, key, ctx.Err())
		}
	}
}

// countRequest counts an effect request; key may be "" where the stand-in
// does not know it yet (SMTP before the data), and is counted with
// countKeyedRequest later.
func (s *standIn) countRequest(key string) {
	s.mu.Lock()
	s.requests++
	if key != "" {
		s.requestsBy[key]++
	}
	s.mu.Unlock()
}

func (s *standIn) countKeyedRequest(key string) {
	s.mu.Lock()
	s.requestsBy[key]++
	s.mu.Unlock()
}

func (s *standIn) countEffect(key string) {
	s.mu.Lock()
	s.effects++
	s.effectsBy[key]++
	s.mu.Unlock()
}

// nextFault takes the next fault for a request with key: one queued for the
// key first, then one queued for any request when anyToo.
func (s *standIn) nextFault(key string, anyToo bool) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var f Fault
	switch {
	case len(s.faultsBy[key]) > 0:
		f = s.faultsBy[key][0]
		s.faultsBy[key] = s.faultsBy[key][1:]
	case anyToo && len(s.faults) > 0:
		f = s.faults[0]
		s.faults = s.faults[1:]
	case anyToo && time.Now().Before(s.throttledUntil):
		f = Fault{Kind: FaultTooManyRequests}
	default:
		return Fault{}, false
	}
	s.logger.Info("sandbox provider misbehaving", slog.String("provider", s.name), slog.String("fault", string(f.Kind)))
	return f, true
}

// hang blocks until gone is closed (the client went away), the stand-in is
// closed, or max passed; it reports whether the client went away. A request
// that hangs for a fault (notify) is announced to WaitHanging under key.
func (s *standIn) hang(key string, gone <-chan struct{}, max time.Duration, notify bool) bool {
	if notify {
		s.mu.Lock()
		s.hung[key]++
		if key != "" {
			s.hung[""]++
		}
		s.hangingNow[key]++
		close(s.hungChanged)
		s.hungChanged = make(chan struct{})
		s.mu.Unlock()
		s.logger.Info("sandbox provider hanging", slog.String("provider", s.name))
		defer func() {
			s.mu.Lock()
			if s.hangingNow[key]--; s.hangingNow[key] <= 0 {
				delete(s.hangingNow, key)
			}
			s.mu.Unlock()
		}()
	}
	timer := time.NewTimer(max)
	defer timer.Stop()
	select {
	case <-gone:
		return true
	case <-s.closing:
		return true
	case <-timer.C:
		return false
	}
}

// Stats are a stand-in's counts, as /_sandbox/stats answers them.
type Stats struct {
	Effects  int `json:"effects"`
	Requests int `json:"requests"`
}

// controlHandler serves /_sandbox/stats (GET) and /_sandbox/faults (POST
// {"kind": "slow", "delay": "3s"}), for a person or a script driving a
// sandbox that runs inside outboxd.
func (s *standIn) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_sandbox/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, Stats{Effects: s.Effects(), Requests: s.Requests()})
	})
	mux.HandleFunc("POST /_sandbox/faults", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Kind  FaultKind `json:"kind"`
			Delay string    `json:"delay"`
			Count int       `json:"count"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be {\"kind\": ..., \"delay\": \"3s\", \"count\": 1}"})
			return
		}
		f := Fault{Kind: body.Kind}
		if body.Delay != "" {
			d, err := time.ParseDuration(body.Delay)
			if err != nil || d < 0 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "delay must be a duration such as 3s"})
				return
			}
			f.Delay = d
		}
		if !f.valid() {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unknown fault kind"})
			return
		}
		for range max(body.Count, 1) {
			s.Misbehave(f)
		}
		writeJSON(w, http.StatusOK, map[string]any{"queued": max(body.Count, 1)})
	})
	return mux
}

// httpServer is an HTTP stand-in's server on a loopback port.
type httpServer struct {
	listener net.Listener
	server   *http.Server
	url      string
	done     chan struct{}
}

func startHTTP(s *standIn, api http.Handler) (*httpServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: error listening: %w", s.name, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/_sandbox/", s.controlHandler())
	mux.Handle("/", api)
	h := &httpServer{
		listener: l,
		server: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
		},
		url:  "http://" + l.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(h.done)
		_ = h.server.Serve(l)
	}()
	return h, nil
}

func (h *httpServer) close(s *standIn) {
	s.closeOnce.Do(func() {
		close(s.closing)
		_ = h.server.Close()
		<-h.done
	})
}

// resetConnection closes the request's connection abruptly (a TCP RST), as
// a provider that crashed after acting would.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Config configures a Sandbox.
type Config struct {
	// Logger receives the stand-ins' notes (faults, hangs). Defaults to a
	// logger that discards.
	Logger *slog.Logger

	// StripeAPIKey is the key the Stripe stand-in accepts. Defaults to any.
	StripeAPIKey string

	// WebhookSecret is the webhook receiver's signing secret, whsec_ and
	// base64. Defaults to a random one (Sandbox.Webhooks.Secret()).
	WebhookSecret string

	// ZendeskEmail and ZendeskToken are the credentials the Zendesk stand-in
	// accepts. Default to any.
	ZendeskEmail, ZendeskToken string
}

// Sandbox is the four stand-ins together.
type Sandbox struct {
	SMTP     *SMTPSink
	Stripe   *Stripe
	Webhooks *WebhookReceiver
	Zendesk  *Zendesk
}

// Start starts all four stand-ins.
func Start(config *Config) (*Sandbox, error) {
	if config == nil {
		config = &Config{}
	}
	var (
		s   Sandbox
		err error
	)
	fail := func(err error) (*Sandbox, error) {
		s.Close()
		return nil, err
	}
	if s.Stripe, err = NewStripe(&StripeConfig{APIKey: config.StripeAPIKey, Logger: config.Logger}); err != nil {
		return fail(err)
	}
	if s.SMTP, err = NewSMTPSink(&SMTPSinkConfig{Logger: config.Logger}); err != nil {
		return fail(err)
	}
	if s.Zendesk, err = NewZendesk(&ZendeskConfig{Email: config.ZendeskEmail, Token: config.ZendeskToken, Logger: config.Logger}); err != nil {
		return fail(err)
	}
	if s.Webhooks, err = NewWebhookReceiver(&WebhookReceiverConfig{Secret: config.WebhookSecret, Logger: config.Logger}); err != nil {
		return fail(err)
	}
	return &s, nil
}

// Close stops the stand-ins that were started.
func (s *Sandbox) Close() {
	if s == nil {
		return
	}
	if s.Stripe != nil {
		s.Stripe.Close()
	}
	if s.SMTP != nil {
		s.SMTP.Close()
	}
	if s.Zendesk != nil {
		s.Zendesk.Close()
	}
	if s.Webhooks != nil {
		s.Webhooks.Close()
	}
}

package sandbox

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WebhookTolerance is how far a webhook-timestamp may be from the
// receiver's clock, as the Standard Webhooks specification suggests.
const WebhookTolerance = 5 * time.Minute

// WebhookReceiverConfig configures the webhook receiver.
type WebhookReceiverConfig struct {
	// Logger receives the receiver's notes. Defaults to a logger that
	// discards.
	Logger *slog.Logger
	// Secret is the signing secret, "whsec_" and base64. Defaults to a
	// random one.
	Secret string
}

// Delivery is one webhook the receiver accepted.
type Delivery struct {
	Body     []byte
	Endpoint string
	ID       string
}

// WebhookReceiver receives webhooks signed per the Standard Webhooks
// specification, and refuses (401) any whose signature does not verify. Under
// /dedupe/{name} it is a receiver that dedupes on webhook-id (a duplicate is
// answered 200 and not performed again); under /hooks/{name} it performs
// every delivery. Effects counts deliveries performed.
type WebhookReceiver struct {
	*standIn
	http   *httpServer
	key    []byte
	secret string

	mu         sync.Mutex
	deliveries []Delivery
	rejected   int
	seen       map[string]bool
}

// NewWebhookReceiver starts the receiver on a loopback port.
func NewWebhookReceiver(config *WebhookReceiverConfig) (*WebhookReceiver, error) {
	if config == nil {
		config = &WebhookReceiverConfig{}
	}
	secret := config.Secret
	if secret == "" {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		secret = "whsec_" + base64.StdEncoding.EncodeToString(b)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, errors.New("sandbox webhook receiver: Secret must be whsec_ and base64")
	}
	wr := &WebhookReceiver{standIn: newStandIn("webhook", config.Logger), key: key, secret: secret, seen: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{name}", func(w http.ResponseWriter, r *http.Request) { wr.receive(w, r, false) })
	mux.HandleFunc("POST /dedupe/{name}", func(w http.ResponseWriter, r *http.Request) { wr.receive(w, r, true) })
	h, err := startHTTP(wr.standIn, mux)
	if err != nil {
		return nil, err
	}
	wr.http = h
	return wr, nil
}

// Secret is the signing secret, for OUTBOX_WEBHOOK_SECRET.
func (wr *WebhookReceiver) Secret() string { return wr.secret }

// EndpointURL is the URL of the endpoint name: one that dedupes on
// webhook-id, or one that performs every delivery.
func (wr *WebhookReceiver) EndpointURL(name string, dedupe bool) string {
	if dedupe {
		return wr.http.url + "/dedupe/" + name
	}
	return wr.http.url + "/hooks/" + name
}

// Close stops the receiver.
func (wr *WebhookReceiver) Close() { wr.http.close(wr.standIn) }

// Deliveries returns the deliveries performed, in order.
func (wr *WebhookReceiver) Deliveries() []Delivery {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return append([]Delivery(nil), wr.deliveries...)
}

// Rejected returns how many requests were refused for their signature.
func (wr *WebhookReceiver) Rejected() int {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return wr.rejected
}

// verify checks a request's Standard Webhooks signature, written here apart
// from the webhook effect's signing so that each checks the other.
func (wr *WebhookReceiver) verify(h http.Header, body []byte) error {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	if id == "" || ts == "" || h.Get("webhook-signature") == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("bad webhook-timestamp")
	}
	if math.Abs(time.Since(time.Unix(secs, 0)).Seconds()) > WebhookTolerance.Seconds() {
		return errors.New("webhook-timestamp outside tolerance")
	}
	mac := hmac.New(sha256.New, wr.key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		version, value, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(value)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no matching signature")
}

func (wr *WebhookReceiver) receive(w http.ResponseWriter, r *http.Request, dedupe bool) {
	id := r.Header.Get("webhook-id")
	wr.countRequest(id)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unreadable body"})
		return
	}
	if err := wr.verify(r.Header, body); err != nil {
		wr.mu.Lock()
		wr.rejected++
		wr.mu.Unlock()
		wr.logger.Warn("sandbox webhook receiver refused a signature", slog.String("error", err.Error()))
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid signature"})
		return
	}
	if dedupe {
		wr.mu.Lock()
		dup := wr.seen[id]
		wr.mu.Unlock()
		if dup {
			writeJSON(w, http.StatusOK, map[string]any{"received": true, "duplicate": true})
			return
		}
	}

	fault, faulty := wr.nextFault(id, true)
	if faulty {
		switch fault.Kind {
		case FaultTooManyRequests:
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "slow down"})
			return
		case FaultUnavailable:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "unavailable"})
			return
		case FaultReject:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "told to refuse by the sandbox"})
			return
		case FaultHangBefore:
			wr.hang(id, r.Context().Done(), hangMax, true)
			return
		}
	}

	wr.mu.Lock()
	if dedupe && wr.seen[id] {
		// A concurrent duplicate got here first.
		wr.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"received": true, "duplicate": true})
		return
	}
	wr.seen[id] = true
	wr.deliveries = append(wr.deliveries, Delivery{Body: body, Endpoint: r.PathValue("name"), ID: id})
	wr.mu.Unlock()
	wr.countEffect(id)

	if faulty {
		switch fault.Kind {
		case FaultServerError:
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "crashed after acting"})
			return
		case FaultReset:
			resetConnection(w)
			return
		case FaultSlow:
			wr.hang(id, r.Context().Done(), fault.delay(), false)
		case FaultHangAfter:
			wr.hang(id, r.Context().Done(), hangMax, true)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"received": true})
}

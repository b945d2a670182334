package sandbox

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ZendeskConfig configures the Zendesk stand-in.
type ZendeskConfig struct {
	// Email and Token are the API-token credentials accepted (basic auth as
	// "email/token:token"). Default to any.
	Email, Token string
	// Logger receives the stand-in's notes. Defaults to a logger that
	// discards.
	Logger *slog.Logger
}

// Ticket is a ticket the Zendesk stand-in created.
type Ticket struct {
	ID          int64     `json:"id"`
	URL         string    `json:"url"`
	ExternalID  string    `json:"external_id"`
	Subject     string    `json:"subject"`
	Description string    `json:"description"`
	Priority    *string   `json:"priority"`
	Status      string    `json:"status"`
	Tags        []string  `json:"tags"`
	Requester   string    `json:"-"`
	CreatedAt   time.Time `json:"created_at"`
}

// Zendesk is a Zendesk-like server for the Tickets API: POST
// /api/v2/tickets.json creates a ticket, GET /api/v2/tickets.json?external_id=
// lists the tickets with that external_id, GET /api/v2/tickets/{id}.json
// reads one. Like Zendesk, it does not make external_id unique: a client that
// sends twice gets two tickets. Effects counts tickets created.
type Zendesk struct {
	*standIn
	email, token string
	http         *httpServer

	mu      sync.Mutex
	tickets []*Ticket
}

// NewZendesk starts the Zendesk stand-in on a loopback port.
func NewZendesk(config *ZendeskConfig) (*Zendesk, error) {
	if config == nil {
		config = &ZendeskConfig{}
	}
	z := &Zendesk{standIn: newStandIn("zendesk", config.Logger), email: config.Email, token: config.Token}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v2/tickets.json", z.create)
	mux.HandleFunc("GET /api/v2/tickets.json", z.list)
	mux.HandleFunc("GET /api/v2/tickets/{file}", z.show)
	h, err := startHTTP(z.standIn, z.authorized(mux))
	if err != nil {
		return nil, err
	}
	z.http = h
	return z, nil
}

// URL is the stand-in's base URL, for OUTBOX_ZENDESK_URL.
func (z *Zendesk) URL() string { return z.http.url }

// Close stops the stand-in.
func (z *Zendesk) Close() { z.http.close(z.standIn) }

// Tickets returns the tickets created, in order.
func (z *Zendesk) Tickets() []Ticket {
	z.mu.Lock()
	defer z.mu.Unlock()
	out := make([]Ticket, len(z.tickets))
	for i, t := range z.tickets {
		out[i] = *t
	}
	return out
}

func zendeskError(w http.ResponseWriter, status int, errCode, description string) {
	writeJSON(w, status, map[string]any{"error": errCode, "description": description})
}

func (z *Zendesk) authorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		email, isToken := strings.CutSuffix(user, "/token")
		if !ok || !isToken || email == "" || pass == "" ||
			(z.email != "" && email != z.email) || (z.token != "" && pass != z.token) {
			if r.Method == http.MethodPost {
				z.countRequest("")
			}
			zendeskError(w, http.StatusUnauthorized, "Couldn't authenticate you", "")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (z *Zendesk) create(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Ticket *struct {
			Comment *struct {
				Body string `json:"body"`
			} `json:"comment"`
			ExternalID string  `json:"external_id"`
			Priority   *string `json:"priority"`
			Requester  *struct {
				Email string `json:"email"`
				Name  string `json:"name"`
			} `json:"requester"`
			Subject string   `json:"subject"`
			Tags    []string `json:"tags"`
		} `json:"ticket"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil || body.Ticket == nil {
		z.countRequest("")
		zendeskError(w, http.StatusBadRequest, "InvalidEndpoint", "Body must be {\"ticket\": {...}}")
		return
	}
	key := body.Ticket.ExternalID
	z.countRequest(key)
	if body.Ticket.Comment == nil || body.Ticket.Comment.Body == "" {
		zendeskError(w, http.StatusUnprocessableEntity, "RecordInvalid", "Record validation errors: comment: cannot be blank")
		return
	}

	fault, faulty := z.nextFault(key, true)
	if faulty {
		switch fault.Kind {
		case FaultTooManyRequests:
			w.Header().Set("Retry-After", "1")
			zendeskError(w, http.StatusTooManyRequests, "APIRateLimitExceeded", "Rate limit exceeded")
			return
		case FaultUnavailable:
			w.Header().Set("Retry-After", "1")
			zendeskError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "Maintenance")
			return
		case FaultReject:
			zendeskError(w, http.StatusUnprocessableEntity, "RecordInvalid", "Record validation errors: told to refuse by the sandbox")
			return
		case FaultHangBefore:
			z.hang(key, r.Context().Done(), hangMax, true)
			return
		case FaultHeldBefore:
			if !z.hold(key) {
				return
			}
		}
	}

	z.mu.Lock()
	t := &Ticket{
		ID:          int64(len(z.tickets) + 1),
		ExternalID:  body.Ticket.ExternalID,
		Subject:     body.Ticket.Subject,
		Description: body.Ticket.Comment.Body,
		Priority:    body.Ticket.Priority,
		Status:      "new",
		Tags:        body.Ticket.Tags,
		CreatedAt:   time.Now().UTC().Truncate(time.Second),
	}
	if body.Ticket.Requester != nil {
		t.Requester = body.Ticket.Requester.Email
	}
	if t.Tags == nil {
		t.Tags = []string{}
	}
	t.URL = z.http.url + "/api/v2/tickets/" + strconv.FormatInt(t.ID, 10) + ".json"
	z.tickets = append(z.tickets, t)
	answer, _ := json.Marshal(map[string]any{"ticket": t})
	z.mu.Unlock()
	z.countEffect(key)

	if faulty {
		switch fault.Kind {
		case FaultServerError:
			zendeskError(w, http.StatusInternalServerError, "InternalServerError", "Something went wrong")
			return
		case FaultReset:
			resetConnection(w)
			return
		case FaultSlow:
			z.hang(key, r.Context().Done(), fault.delay(), false)
		case FaultHangAfter:
			z.hang(key, r.Context().Done(), hangMax, true)
		}
	}
	w.Header().Set("Location", t.URL)
	writeRaw(w, http.StatusCreated, answer)
}

func (z *Zendesk) list(w http.ResponseWriter, r *http.Request) {
	externalID, filter := r.URL.Query()["external_id"]
	z.mu.Lock()
	found := []*Ticket{}
	for _, t := range z.tickets {
		if !filter || t.ExternalID == externalID[0] {
			found = append(found, t)
		}
	}
	answer, _ := json.Marshal(map[string]any{"tickets": found, "count": len(found), "next_page": nil, "previous_page": nil})
	z.mu.Unlock()
	writeRaw(w, http.StatusOK, answer)
}

func (z *Zendesk) show(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(strings.TrimSuffix(r.PathValue("file"), ".json"), 10, 64)
	z.mu.Lock()
	defer z.mu.Unlock()
	if err != nil || id < 1 || id > int64(len(z.tickets)) {
		zendeskError(w, http.StatusNotFound, "RecordNotFound", "Not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ticket": z.tickets[id-1]})
}

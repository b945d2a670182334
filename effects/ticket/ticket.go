package ticket

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/internal/argcheck"
	"github.com/outbox-dev/outbox/effects/internal/httpsend"
)

// Name is the effect's name.
const Name = "ticket"

// Limits of the arguments.
const (
	subjectMax = 255
	bodyMax    = 64 << 10 // Zendesk's limit for a comment
	tagsMax    = 50
	tagMax     = 255
)

// Priorities returns the priorities Zendesk knows, in a new slice.
func Priorities() []string { return []string{"low", "normal", "high", "urgent"} }

// Config configures the ticket effect.
type Config struct {
	// Email is the Zendesk agent the API token belongs to. Required.
	Email string

	// HTTPClient sends the requests; its transport is wrapped to see
	// whether a request was written out in full. It should not follow
	// redirects. Defaults to a client that keeps up to 50 idle connections
	// and follows no redirect.
	HTTPClient *http.Client

	// Token is the Zendesk API token. Required.
	Token string

	// URL is the account's base URL, such as https://acme.zendesk.com.
	// Required.
	URL string
}

// Effect is the ticket effect. It is safe for concurrent use.
type Effect struct {
	client *http.Client
	email  string
	token  string
	url    string
}

// The capabilities Effect has: the build breaks if a method drifts from
// its interface.
var (
	_ effects.Effect       = (*Effect)(nil)
	_ effects.ArgsSchemaer = (*Effect)(nil)
	_ effects.Reconciler   = (*Effect)(nil)
)

// New returns the ticket effect.
func New(config *Config) (*Effect, error) {
	if config == nil || config.URL == "" || config.Email == "" || config.Token == "" {
		return nil, errors.New("ticket: URL, Email and Token must be set")
	}
	u, err := url.Parse(config.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("ticket: URL must be an http or https URL")
	}
	client := httpsend.NewClient(50)
	if config.HTTPClient != nil {
		client = httpsend.Wrap(config.HTTPClient)
	}
	return &Effect{client: client, email: config.Email, token: config.Token, url: strings.TrimRight(config.URL, "/")}, nil
}

// Name implements effects.Effect.
func (e *Effect) Name() string { return Name }

// Guarantee implements effects.Effect.
func (e *Effect) Guarantee() effects.Guarantee { return effects.GuaranteeReconcilable }

// Args are the ticket's arguments.
type Args struct {
	Subject        string
	Body           string
	RequesterEmail string
	Priority       string
	Tags           []string
}

type rawArgs struct {
	Body           *string  `json:"body"`
	Priority       *string  `json:"priority"`
	RequesterEmail *string  `json:"requester_email"`
	Subject        *string  `json:"subject"`
	Tags           []string `json:"tags"`
}

var tagRE = regexp.MustCompile(`^[^\s,]+$`)

// argsSchema is ParseArgs' rules as a JSON Schema, with its limits.
var argsSchema = fmt.Sprintf(`{
	"type": "object",
	"properties": {
		"subject": {"type": "string", "minLength": 1, "maxLength": %[1]d, "description": "The ticket's subject."},
		"body": {"type": "string", "minLength": 1, "maxLength": %[2]d, "description": "The ticket's first comment."},
		"requester_email": {"type": "string", "format": "email", "description": "The requester's email address."},
		"priority": {"type": "string", "enum": %[3]s, "description": "The ticket's priority."},
		"tags": {
			"type": "array",
			"items": {"type": "string", "minLength": 1, "maxLength": %[4]d, "pattern": %[5]q, "description": "A tag: one word, without spaces or commas."},
			"maxItems": %[6]d,
			"description": "Tags to set on the ticket, up to %[6]d."
		}
	},
	"required": ["subject", "body"],
	"additionalProperties": false
}`, subjectMax, bodyMax, mustJSON(Priorities()), tagMax, tagRE.String(), tagsMax)

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// ArgsSchema returns the JSON Schema of a ticket's arguments: what
// ParseArgs checks, as far as a schema can say it.
func ArgsSchema() json.RawMessage { return json.RawMessage(argsSchema) }

// ArgsSchema implements effects.ArgsSchemaer.
func (e *Effect) ArgsSchema() json.RawMessage { return ArgsSchema() }

// ParseArgs validates a ticket's arguments: subject and body (required),
// requester_email, priority (low, normal, high or urgent) and tags (up to 50
// words without spaces or commas).
func ParseArgs(args json.RawMessage) (*Args, error) {
	var raw rawArgs
	if err := argcheck.Object(args, &raw); err != nil {
		return nil, err
	}
	if err := argcheck.Text("subject", raw.Subject, true, subjectMax, true); err != nil {
		return nil, err
	}
	if err := argcheck.Text("body", raw.Body, true, bodyMax, false); err != nil {
		return nil, err
	}
	a := &Args{Subject: *raw.Subject, Body: *raw.Body}
	if raw.RequesterEmail != nil {
		addr, err := argcheck.Address("requester_email", *raw.RequesterEmail)
		if err != nil {
			return nil, err
		}
		a.RequesterEmail = addr.Address
	}
	if raw.Priority != nil {
		ok := false
		for _, p := range Priorities() {
			ok = ok || *raw.Priority == p
		}
		if !ok {
			return nil, &effects.ArgError{Field: "priority", Message: "must be low, normal, high or urgent"}
		}
		a.Priority = *raw.Priority
	}
	if len(raw.Tags) > tagsMax {
		return nil, &effects.ArgError{Field: "tags", Message: fmt.Sprintf("must hold at most %d tags", tagsMax)}
	}
	for i, t := range raw.Tags {
		if len(t) > tagMax || !tagRE.MatchString(t) {
			return nil, &effects.ArgError{Field: fmt.Sprintf("tags[%d]", i), Message: fmt.Sprintf("must be a word of 1 to %d characters without spaces or commas", tagMax)}
		}
	}
	a.Tags = raw.Tags
	return a, nil
}

// ValidateArgs implements effects.Effect.
func (e *Effect) ValidateArgs(args json.RawMessage) error {
	_, err := ParseArgs(args)
	return err
}

// Result is the ticket's result, stored in the intent: the same whether the
// ticket was created by this attempt or found by Lookup.
type Result struct {
	Status   string `json:"status,omitempty"`
	TicketID int64  `json:"ticket_id"`
	URL      string `json:"url,omitempty"`
}

// zendeskTicket is the part of Zendesk's ticket that the effect reads.
type zendeskTicket struct {
	ID         int64  `json:"id"`
	ExternalID string `json:"external_id"`
	Status     string `json:"status"`
	URL        string `json:"url"`
}

func (t *zendeskTicket) result() (json.RawMessage, error) {
	return json.Marshal(Result{Status: t.Status, TicketID: t.ID, URL: t.URL})
}

// Execute implements effects.Effect: one ticket, external_id = provider key.
func (e *Effect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	args, err := ParseArgs(req.Args)
	if err != nil {
		return nil, effects.Permanent(effects.CodeInvalidArgs, err)
	}
	type requester struct {
		Email string `json:"email"`
		Name  string `json:"name"`
	}
	type comment struct {
		Body string `json:"body"`
	}
	ticket := struct {
		Comment    comment    `json:"comment"`
		ExternalID string     `json:"external_id"`
		Priority   string     `json:"priority,omitempty"`
		Requester  *requester `json:"requester,omitempty"`
		Subject    string     `json:"subject"`
		Tags       []string   `json:"tags,omitempty"`
	}{
		Comment:    comment{Body: args.Body},
		ExternalID: req.ProviderKey,
		Priority:   args.Priority,
		Subject:    args.Subject,
		Tags:       args.Tags,
	}
	if args.RequesterEmail != "" {
		// Zendesk creates the requester if it does not know the address,
		// and wants a name for that.
		name, _, _ := strings.Cut(args.RequesterEmail, "@")
		ticket.Requester = &requester{Email: args.RequesterEmail, Name: name}
	}
	body, err := json.Marshal(map[string]any{"ticket": ticket})
	if err != nil {
		return nil, effects.Permanent(effects.CodeInvalidArgs, err)
	}
	// A body without GetBody: net/http then never sends the request again by
	// itself (it does, for a replayable request, when a kept-alive connection
	// fails), which would open a second ticket behind the worker's back.
	hreq, err := http.NewRequestWithContext(httpsend.WithURLTemplate(ctx, "/api/v2/tickets.json"), http.MethodPost, e.url+"/api/v2/tickets.json", io.NopCloser(bytes.NewReader(body)))
	if err != nil {
		return nil, effects.Permanent("invalid_config", errors.New("zendesk: bad URL"))
	}
	hreq.ContentLength = int64(len(body))
	hreq.Header.Set("Content-Type", "application/json")
	e.authorize(hreq)

	resp, err := httpsend.Do(e.client, hreq, "zendesk")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, httpsend.WithRetryAfter(httpsend.StatusError(resp.StatusCode, "zendesk", zendeskDetail(resp.Body)), resp.Header)
	}
	var answer struct {
		Ticket *zendeskTicket `json:"ticket"`
	}
	if err := json.Unmarshal(resp.Body, &answer); err != nil || answer.Ticket == nil || answer.Ticket.ID == 0 {
		return nil, effects.Ambiguous("unreadable_answer", fmt.Errorf("zendesk: answered %d with a body that is not a ticket", resp.StatusCode))
	}
	return answer.Ticket.result()
}

// Lookup implements effects.Reconciler: the ticket whose external_id is the
// provider key, the oldest if there are several.
func (e *Effect) Lookup(ctx context.Context, providerKey string) (json.RawMessage, bool, error) {
	q := url.Values{"external_id": {providerKey}}
	// The span shows the path only: the query is the provider key.
	hreq, err := http.NewRequestWithContext(httpsend.WithURLTemplate(ctx, "/api/v2/tickets.json"), http.MethodGet, e.url+"/api/v2/tickets.json?"+q.Encode(), nil)
	if err != nil {
		return nil, false, errors.New("zendesk: bad URL")
	}
	e.authorize(hreq)
	resp, err := httpsend.Do(e.client, hreq, "zendesk")
	if err != nil {
		return nil, false, fmt.Errorf("error looking up ticket: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("error looking up ticket: %w", httpsend.StatusError(resp.StatusCode, "zendesk", zendeskDetail(resp.Body)))
	}
	var answer struct {
		Tickets []zendeskTicket `json:"tickets"`
	}
	if err := json.Unmarshal(resp.Body, &answer); err != nil || answer.Tickets == nil {
		return nil, false, errors.New("error looking up ticket: zendesk answered with a body that is not a ticket list")
	}
	var oldest *zendeskTicket
	for i := range answer.Tickets {
		t := &answer.Tickets[i]
		// Zendesk matches external_id exactly, but a look-up that finds
		// another ticket must not count as this one.
		if t.ExternalID == providerKey && (oldest == nil || t.ID < oldest.ID) {
			oldest = t
		}
	}
	if oldest == nil {
		return nil, false, nil
	}
	res, err := oldest.result()
	return res, err == nil, err
}

func (e *Effect) authorize(req *http.Request) {
	req.SetBasicAuth(e.email+"/token", e.token)
	req.Header.Set("Accept", "application/json")
}

// zendeskDetail is Zendesk's error and description, without its details,
// which can quote the ticket's fields.
func zendeskDetail(body []byte) string {
	var e struct {
		Error       any    `json:"error"`
		Description string `json:"description"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	var parts []string
	switch v := e.Error.(type) {
	case string:
		parts = append(parts, v)
	case map[string]any:
		if title, ok := v["title"].(string); ok {
			parts = append(parts, title)
		}
	}
	if e.Description != "" {
		parts = append(parts, e.Description)
	}
	return httpsend.Truncate(strings.Join(parts, ": "), 300)
}

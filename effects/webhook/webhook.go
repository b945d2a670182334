package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/internal/argcheck"
	"github.com/outbox-dev/outbox/effects/internal/httpsend"
)

// Name is the effect's name.
const Name = "webhook"

// SecretPrefix starts a Standard Webhooks secret.
const SecretPrefix = "whsec_"

// payloadMax bounds a payload's size.
const payloadMax = 256 << 10

// Endpoint is a configured receiver.
type Endpoint struct {
	// Dedupe says the receiver dedupes on webhook-id.
	Dedupe bool
	// Name is what intents call it.
	Name string
	// URL is where the webhook is POSTed.
	URL string
}

var endpointNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// argsSchema is ParseArgs' rules as a JSON Schema. Which endpoints are
// configured is ParseArgs' alone: the schema is the same for every
// configuration.
var argsSchema = fmt.Sprintf(`{
	"type": "object",
	"properties": {
		"endpoint": {"type": "string", "pattern": %q, "description": "The name of an endpoint the operator configured (not a URL)."},
		"payload": {"type": "object", "description": "The JSON object to post."}
	},
	"required": ["endpoint", "payload"],
	"additionalProperties": false
}`, endpointNameRE.String())

// ArgsSchema returns the JSON Schema of a webhook's arguments: what
// ParseArgs checks, as far as a schema can say it.
func ArgsSchema() json.RawMessage { return json.RawMessage(argsSchema) }

// ArgsSchema implements effects.ArgsSchemaer.
func (e *Effect) ArgsSchema() json.RawMessage { return ArgsSchema() }

// ParseEndpoints reads endpoints written "name=url[;dedupe],...". Errors name
// the entry by position and never quote a URL, which can carry a token.
func ParseEndpoints(s string) ([]Endpoint, error) {
	var out []Endpoint
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, rawURL, ok := strings.Cut(entry, "=")
		if !ok || !endpointNameRE.MatchString(name) {
			return nil, fmt.Errorf("entry %d: must be name=url[;dedupe] with a name of letters, digits, _ . -", i+1)
		}
		ep := Endpoint{Name: name, URL: rawURL}
		if u, found := strings.CutSuffix(rawURL, ";dedupe"); found {
			ep.URL, ep.Dedupe = u, true
		}
		if err := validURL(ep.URL); err != nil {
			return nil, fmt.Errorf("entry %d (%s): %w", i+1, name, err)
		}
		if slices.ContainsFunc(out, func(e Endpoint) bool { return e.Name == name }) {
			return nil, fmt.Errorf("entry %d: endpoint %s named twice", i+1, name)
		}
		out = append(out, ep)
	}
	if len(out) == 0 {
		return nil, errors.New("no endpoint")
	}
	return out, nil
}

func validURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("URL must be an absolute http or https URL")
	}
	return nil
}

// ParseSecret reads a Standard Webhooks secret: "whsec_" and the base64 of
// the key.
func ParseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, errors.New("secret must start with " + SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) == 0 {
		return nil, errors.New("secret must be " + SecretPrefix + " followed by base64")
	}
	return key, nil
}

// Sign returns the webhook-signature of one message: "v1," and the base64
// HMAC-SHA256 of "id.timestamp.body" under key.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Config configures the webhook effect.
type Config struct {
	// Endpoints are the receivers intents may name. Required.
	Endpoints []Endpoint

	// HTTPClient sends the requests; its transport is wrapped to see
	// whether a request was written out in full. It should not follow
	// redirects. Defaults to a client that keeps up to 50 idle connections
	// and follows no redirect.
	HTTPClient *http.Client

	// NowFunc is the clock of webhook-timestamp. Defaults to time.Now.
	NowFunc func() time.Time

	// Secret is the signing secret, "whsec_" and base64. Required.
	Secret string
}

// Effect is the webhook effect. It is safe for concurrent use.
type Effect struct {
	client    *http.Client
	endpoints map[string]Endpoint
	guarantee effects.Guarantee
	key       []byte
	names     []string
	now       func() time.Time
}

// The capabilities Effect has: the build breaks if a method drifts from
// its interface.
var (
	_ effects.Effect         = (*Effect)(nil)
	_ effects.ArgsSchemaer   = (*Effect)(nil)
	_ effects.ArgsGuaranteer = (*Effect)(nil)
)

// New returns the webhook effect.
func New(config *Config) (*Effect, error) {
	if config == nil || len(config.Endpoints) == 0 {
		return nil, errors.New("webhook: Endpoints must be set")
	}
	key, err := ParseSecret(config.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	e := &Effect{
		client:    config.HTTPClient,
		endpoints: make(map[string]Endpoint, len(config.Endpoints)),
		guarantee: effects.GuaranteeDeduplicated,
		key:       key,
		now:       config.NowFunc,
	}
	for _, ep := range config.Endpoints {
		if !endpointNameRE.MatchString(ep.Name) {
			return nil, fmt.Errorf("webhook: endpoint name %q must be letters, digits, _ . -", ep.Name)
		}
		if err := validURL(ep.URL); err != nil {
			return nil, fmt.Errorf("webhook: endpoint %s: %w", ep.Name, err)
		}
		if _, dup := e.endpoints[ep.Name]; dup {
			return nil, fmt.Errorf("webhook: endpoint %s named twice", ep.Name)
		}
		e.endpoints[ep.Name] = ep
		e.names = append(e.names, ep.Name)
		if !ep.Dedupe {
			e.guarantee = effects.GuaranteeAtMostOnce
		}
	}
	slices.Sort(e.names)
	if e.client == nil {
		e.client = httpsend.NewClient(50)
	} else {
		e.client = httpsend.Wrap(e.client)
	}
	if e.now == nil {
		e.now = time.Now
	}
	return e, nil
}

// Name implements effects.Effect.
func (e *Effect) Name() string { return Name }

// Guarantee implements effects.Effect: deduplicated when every endpoint
// dedupes, else at most once. The guarantee of one intent is its endpoint's
// (GuaranteeFor).
func (e *Effect) Guarantee() effects.Guarantee { return e.guarantee }

// GuaranteeFor implements effects.ArgsGuaranteer: deduplicated for an
// endpoint configured with ";dedupe", at most once for any other.
func (e *Effect) GuaranteeFor(args json.RawMessage) effects.Guarantee {
	parsed, err := e.ParseArgs(args)
	if err != nil {
		return e.guarantee
	}
	if parsed.Endpoint.Dedupe {
		return effects.GuaranteeDeduplicated
	}
	return effects.GuaranteeAtMostOnce
}

// Endpoints returns the configured endpoints, by name.
func (e *Effect) Endpoints() []Endpoint {
	out := make([]Endpoint, len(e.names))
	for i, n := range e.names {
		out[i] = e.endpoints[n]
	}
	return out
}

// Args are the webhook's arguments.
type Args struct {
	Endpoint Endpoint
	// Payload is the body sent, compact JSON.
	Payload []byte
}

type rawArgs struct {
	Endpoint *string         `json:"endpoint"`
	Payload  json.RawMessage `json:"payload"`
}

// ParseArgs validates a webhook's arguments: endpoint (a configured name)
// and payload (a JSON object).
func (e *Effect) ParseArgs(args json.RawMessage) (*Args, error) {
	var raw rawArgs
	if err := argcheck.Object(args, &raw); err != nil {
		return nil, err
	}
	if raw.Endpoint == nil || *raw.Endpoint == "" {
		return nil, &effects.ArgError{Field: "endpoint", Message: "is required: one of " + strings.Join(e.names, ", ")}
	}
	ep, ok := e.endpoints[*raw.Endpoint]
	if !ok {
		return nil, &effects.ArgError{Field: "endpoint", Message: "is not a configured endpoint; configured: " + strings.Join(e.names, ", ")}
	}
	payload := bytes.TrimSpace(raw.Payload)
	if len(payload) == 0 || string(payload) == "null" {
		return nil, &effects.ArgError{Field: "payload", Message: "is required: a JSON object"}
	}
	if payload[0] != '{' {
		return nil, &effects.ArgError{Field: "payload", Message: "must be a JSON object"}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, payload); err != nil {
		return nil, &effects.ArgError{Field: "payload", Message: "must be a JSON object"}
	}
	if compact.Len() > payloadMax {
		return nil, &effects.ArgError{Field: "payload", Message: fmt.Sprintf("must be at most %d bytes as JSON", payloadMax)}
	}
	return &Args{Endpoint: ep, Payload: compact.Bytes()}, nil
}

// ValidateArgs implements effects.Effect.
func (e *Effect) ValidateArgs(args json.RawMessage) error {
	_, err := e.ParseArgs(args)
	return err
}

// Result is the webhook's result, stored in the intent.
type Result struct {
	Endpoint string `json:"endpoint"`
	Status   int    `json:"status"`
}

// Execute implements effects.Effect: one signed POST.
func (e *Effect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	args, err := e.ParseArgs(req.Args)
	if err != nil {
		return nil, effects.Permanent(effects.CodeInvalidArgs, err)
	}
	provider := "webhook " + args.Endpoint.Name
	// A body without GetBody, so that net/http never resends the request by
	// itself after a failure on a kept-alive connection (it would for a
	// request with Idempotency-Key): for an at-most-once endpoint that would
	// be a second delivery the worker never decided on.
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, args.Endpoint.URL, io.NopCloser(bytes.NewReader(args.Payload)))
	if err != nil {
		return nil, effects.Permanent("invalid_config", errors.New(provider+": bad URL"))
	}
	hreq.ContentLength = int64(len(args.Payload))
	ts := e.now().Unix()
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("User-Agent", "outbox-webhook")
	hreq.Header.Set("Idempotency-Key", req.ProviderKey)
	hreq.Header.Set("webhook-id", req.ProviderKey)
	hreq.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	hreq.Header.Set("webhook-signature", Sign(e.key, req.ProviderKey, ts, args.Payload))

	resp, err := httpsend.Do(e.client, hreq, provider)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The receiver's body is not quoted: it is theirs, and may echo
		// the payload.
		return nil, httpsend.WithRetryAfter(httpsend.StatusError(resp.StatusCode, provider, ""), resp.Header)
	}
	return json.Marshal(Result{Endpoint: args.Endpoint.Name, Status: resp.StatusCode})
}

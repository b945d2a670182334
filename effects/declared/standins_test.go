package declared

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The loopback stand-ins of the providers that the presets (and the
// declarations in these tests) call. Each implements the behaviour its
// preset's comment in presets.yaml cites from the provider's documentation,
// no more, and counts the effects it performs, so that a test can tell a
// replay or a merge from a second action. Each can be told to misbehave:
// one fault per request, in order.
//
// They are not internal/sandbox's stand-ins, which these tests use where
// the provider is one of the sandbox's (Zendesk). A declaration's rules
// classify a provider's own answers, so a fault here is any answer
// (status, headers such as Retry-After, the provider's error body, a
// refusal inside a 200, the request quoted back), and it meets look-ups as
// well as effect requests. The sandbox runs inside outboxd for users
// (OUTBOX_SANDBOX, its /_sandbox/faults control), where a fault is one of a
// few kinds, answered as the provider would, and never meets a look-up;
// test-only kinds there would be a fault vocabulary users see and no
// provider has.

// fault is an answer a stand-in gives instead of its own.
type fault struct {
	// act performs the effect first: an answer lost after the provider
	// acted. Otherwise nothing is done.
	act bool
	// delay holds the answer that long, or until the client goes away.
	delay time.Duration
	// reset closes the connection instead of answering.
	reset bool
	// status, header and body are the answer; a status of 0 answers the
	// stand-in's own answer (after delay).
	status int
	header map[string]string
	body   string
	// echo replaces ECHO in body with the request's credentials, URL and
	// body, as a provider's error may quote the request: secrets must not
	// reach the intent's error through it.
	echo bool
}

// answer is a stand-in's own answer to a request.
type answer struct {
	status int
	header map[string]string
	body   any
}

// standIn is what the stand-ins share: the server, the request count, the
// last request and the queued faults.
type standIn struct {
	*httptest.Server
	handle func(r *http.Request, body []byte) answer

	mu         sync.Mutex
	requests   int
	lastHeader http.Header
	lastURL    *url.URL
	lastBody   []byte
	faults     []fault
}

func (s *standIn) start(t *testing.T, handle func(r *http.Request, body []byte) answer) {
	s.handle = handle
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
}

// misbehave queues faults, one per request to come.
func (s *standIn) misbehave(faults ...fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// last returns the last request's headers, URL and body.
func (s *standIn) last() (http.Header, *url.URL, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastHeader, s.lastURL, s.lastBody
}

func (s *standIn) requestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests++
	s.lastHeader, s.lastURL, s.lastBody = r.Header.Clone(), r.URL, body
	var f *fault
	if len(s.faults) > 0 {
		next := s.faults[0]
		f, s.faults = &next, s.faults[1:]
	}
	s.mu.Unlock()
	if f != nil && !f.act {
		writeFault(w, r, body, f)
		return
	}
	a := s.handle(r, body)
	if f != nil && writeFault(w, r, body, f) {
		return
	}
	for name, v := range a.header {
		w.Header().Set(name, v)
	}
	raw, ok := a.body.([]byte)
	if !ok {
		raw, _ = json.Marshal(a.body)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write(raw)
}

// writeFault answers f, after its delay: a reset or its answer. It reports
// false for a fault without a status, which only delays the stand-in's own
// answer, for the caller to write.
func writeFault(w http.ResponseWriter, r *http.Request, body []byte, f *fault) bool {
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-r.Context().Done():
			return true // nobody to answer
		}
	}
	if f.reset {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return true
	}
	if f.status == 0 {
		return false
	}
	out := f.body
	if f.echo {
		quoted, _ := json.Marshal(r.Header.Get("Authorization") + " " + r.URL.String() + " " + string(body))
		out = strings.ReplaceAll(out, "ECHO", string(quoted[1:len(quoted)-1]))
	}
	for name, v := range f.header {
		w.Header().Set(name, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	_, _ = w.Write([]byte(out))
	return true
}

// canonicalJSON re-encodes a JSON document with sorted keys, so that two
// payloads compare by content.
func canonicalJSON(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// resendStandIn is Resend's POST /emails as the resend.email preset cites
// it (resend.com/docs/dashboard/emails/idempotency-keys): a repeat of an
// Idempotency-Key answers the first email's answer without sending again;
// the same key with another payload is refused with 409
// invalid_idempotent_request; the same key while the first request is
// still being processed gets 409 concurrent_idempotent_requests; a request
// without the key sends every time.
type resendStandIn struct {
	standIn
	apiKey string

	// emails counts emails sent; the rest are under standIn.mu.
	emails   int
	answers  map[string]resendStored
	inFlight map[string]bool
	gate     *gate
}

type resendStored struct {
	payload string
	body    []byte
}

// gate holds the next request inside the provider, once it is marked in
// flight, until release is closed.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newResendStandIn(t *testing.T, apiKey string) *resendStandIn {
	s := &resendStandIn{apiKey: apiKey, answers: map[string]resendStored{}, inFlight: map[string]bool{}}
	s.start(t, s.serve)
	return s
}

// holdNext holds the next email in flight: entered is closed once it is,
// and release lets it finish.
func (s *resendStandIn) holdNext(t *testing.T) (entered <-chan struct{}, release func()) {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { close(g.release) }) }
	// Registered before the server's Close (cleanups run last first), so
	// that a failed test does not leave Close waiting on the held request.
	t.Cleanup(release)
	return g.entered, release
}

func (s *resendStandIn) emailCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.emails
}

func resendError(status int, name, msg string) answer {
	return answer{status: status, body: map[string]any{"statusCode": status, "name": name, "message": msg}}
}

func (s *resendStandIn) serve(r *http.Request, body []byte) answer {
	if r.Method != http.MethodPost || r.URL.Path != "/emails" {
		return resendError(http.StatusNotFound, "not_found", "The requested endpoint does not exist.")
	}
	switch auth := r.Header.Get("Authorization"); {
	case auth == "":
		return resendError(http.StatusUnauthorized, "missing_api_key", "Missing API key in the authorization header.")
	case auth != "Bearer "+s.apiKey:
		return resendError(http.StatusForbidden, "invalid_api_key", "API key is invalid.")
	}
	var email struct {
		From    string   `json:"from"`
		To      []string `json:"to"`
		Subject string   `json:"subject"`
	}
	if err := json.Unmarshal(body, &email); err != nil {
		return resendError(http.StatusUnprocessableEntity, "validation_error", "Invalid JSON.")
	}
	if email.From == "" || len(email.To) == 0 || email.Subject == "" {
		return resendError(http.StatusUnprocessableEntity, "validation_error", "Missing `from`, `to` or `subject` field.")
	}
	key, payload := r.Header.Get("Idempotency-Key"), canonicalJSON(body)
	s.mu.Lock()
	if key != "" {
		if stored, ok := s.answers[key]; ok {
			s.mu.Unlock()
			if stored.payload != payload {
				return resendError(http.StatusConflict, "invalid_idempotent_request", "Same idempotency key used with a different request payload. Change your idempotency key or payload.")
			}
			return answer{status: http.StatusOK, body: stored.body}
		}
		if s.inFlight[key] {
			s.mu.Unlock()
			return resendError(http.StatusConflict, "concurrent_idempotent_requests", "Same idempotency key used while original request is still in progress. Try the request again later.")
		}
		s.inFlight[key] = true
	}
	g := s.gate
	s.gate = nil
	s.mu.Unlock()
	if g != nil {
		close(g.entered)
		<-g.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emails++
	out := []byte(fmt.Sprintf(`{"id":"49a3999c-0ce1-4ea6-ab68-afcd6dc2e7%02d"}`, s.emails))
	if key != "" {
		s.answers[key] = resendStored{payload: payload, body: out}
		delete(s.inFlight, key)
	}
	return answer{status: http.StatusOK, body: out}
}

// pagerDutyStandIn is PagerDuty's Events API v2 (POST /v2/enqueue) as the
// pagerduty.event preset cites it
// (developer.pagerduty.com/docs/events-api-v2/trigger-events/): a trigger
// whose dedup_key matches an open alert is merged into it; once that alert
// is resolved, the same key opens a new one; an accepted event is answered
// 202 with its dedup_key; an invalid one 400 "invalid event".
type pagerDutyStandIn struct {
	standIn
	routingKey string

	// alerts counts alerts opened, events the triggers accepted.
	alerts int
	events int
	open   map[string]bool
}

func newPagerDutyStandIn(t *testing.T, routingKey string) *pagerDutyStandIn {
	s := &pagerDutyStandIn{routingKey: routingKey, open: map[string]bool{}}
	s.start(t, s.serve)
	return s
}

func (s *pagerDutyStandIn) counts() (alerts, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alerts, s.events
}

// resolve resolves the alert of dedupKey, as a responder would.
func (s *pagerDutyStandIn) resolve(dedupKey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, dedupKey)
}

func (s *pagerDutyStandIn) serve(r *http.Request, body []byte) answer {
	invalid := func(reason string) answer {
		return answer{status: http.StatusBadRequest, body: map[string]any{"status": "invalid event", "message": "Event object is invalid", "errors": []string{reason}}}
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v2/enqueue" {
		return answer{status: http.StatusNotFound, body: map[string]any{"status": "not found"}}
	}
	var ev struct {
		RoutingKey  string `json:"routing_key"`
		EventAction string `json:"event_action"`
		DedupKey    string `json:"dedup_key"`
		Payload     *struct {
			Summary  string `json:"summary"`
			Source   string `json:"source"`
			Severity string `json:"severity"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return invalid("Request body is not valid JSON")
	}
	switch {
	case ev.RoutingKey != s.routingKey:
		return invalid("'routing_key' is invalid")
	case ev.EventAction != "trigger":
		return invalid("'event_action' must be trigger here")
	case len(ev.DedupKey) > 255:
		return invalid("'dedup_key' is longer than 255 characters")
	case ev.Payload == nil || ev.Payload.Summary == "" || ev.Payload.Source == "":
		return invalid("'payload' needs summary and source")
	case !slices.Contains([]string{"critical", "error", "warning", "info"}, ev.Payload.Severity):
		return invalid("'payload.severity' is invalid")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events++
	if ev.DedupKey == "" {
		ev.DedupKey = fmt.Sprintf("generated-%d", s.events)
	}
	if !s.open[ev.DedupKey] {
		s.open[ev.DedupKey] = true
		s.alerts++
	}
	return answer{status: http.StatusAccepted, body: map[string]any{"status": "success", "message": "Event processed", "dedup_key": ev.DedupKey}}
}

// slackStandIn is Slack's Web API as the slack.message preset cites it:
// chat.postMessage (api.slack.com/methods/chat.postMessage) posts a
// message, keeping its metadata (api.slack.com/metadata/using), and
// answers ok: true with channel and ts; a refusal is HTTP 200 with ok:
// false and an error. conversations.history
// (api.slack.com/methods/conversations.history) lists a channel's
// top-level messages, newest first, up to limit; thread replies are not
// among them; metadata is included with include_all_metadata=true.
type slackStandIn struct {
	standIn
	token string

	// posts counts messages posted, replies included.
	posts    int
	channels map[string][]map[string]any
	replies  map[string][]map[string]any
}

func newSlackStandIn(t *testing.T, token string, channels ...string) *slackStandIn {
	s := &slackStandIn{token: token, channels: map[string][]map[string]any{}, replies: map[string][]map[string]any{}}
	for _, ch := range channels {
		// Other messages in the channel: one without metadata, and one
		// another app posted with metadata of its own shape, which the
		// look-up's match must pass over without failing.
		s.channels[ch] = []map[string]any{
			{"type": "message", "user": "U012", "text": "hello", "ts": "1699999999.000001"},
			{"type": "message", "bot_id": "B099", "text": "deploy", "ts": "1699999999.000002",
				"metadata": map[string]any{"event_type": "deploy_started", "event_payload": map[string]any{"service": "api"}}},
		}
	}
	s.start(t, s.serve)
	return s
}

func (s *slackStandIn) postCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts
}

func slackError(code string) answer {
	return answer{status: http.StatusOK, body: map[string]any{"ok": false, "error": code}}
}

func (s *slackStandIn) serve(r *http.Request, body []byte) answer {
	switch auth := r.Header.Get("Authorization"); {
	case auth == "":
		return slackError("not_authed")
	case auth != "Bearer "+s.token:
		return slackError("invalid_auth")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/api/chat.postMessage":
		var msg struct {
			Channel  string         `json:"channel"`
			Text     string         `json:"text"`
			ThreadTS string         `json:"thread_ts"`
			Metadata map[string]any `json:"metadata"`
		}
		if r.Method != http.MethodPost || json.Unmarshal(body, &msg) != nil {
			return slackError("invalid_arguments")
		}
		history, ok := s.channels[msg.Channel]
		switch {
		case !ok:
			return slackError("channel_not_found")
		case msg.Text == "":
			return slackError("no_text")
		}
		s.posts++
		posted := map[string]any{"type": "message", "bot_id": "B001", "text": msg.Text, "ts": fmt.Sprintf("1700000000.%06d", s.posts)}
		if msg.Metadata != nil {
			posted["metadata"] = msg.Metadata
		}
		if msg.ThreadTS != "" {
			posted["thread_ts"] = msg.ThreadTS
			s.replies[msg.ThreadTS] = append(s.replies[msg.ThreadTS], posted)
		} else {
			s.channels[msg.Channel] = append(history, posted)
		}
		return answer{status: http.StatusOK, body: map[string]any{"ok": true, "channel": msg.Channel, "ts": posted["ts"], "message": posted}}
	case "/api/conversations.history":
		q := r.URL.Query()
		history, ok := s.channels[q.Get("channel")]
		if !ok {
			return slackError("channel_not_found")
		}
		limit, err := strconv.Atoi(q.Get("limit"))
		if err != nil || limit <= 0 {
			limit = 100
		}
		limit = min(limit, 999)
		var out []map[string]any
		for i := len(history) - 1; i >= 0 && len(out) < limit; i-- {
			m := history[i]
			if q.Get("include_all_metadata") != "true" {
				m = withoutKeys(m, "metadata")
			}
			out = append(out, m)
		}
		return answer{status: http.StatusOK, body: map[string]any{"ok": true, "messages": out, "has_more": len(history) > limit}}
	}
	return slackError("unknown_method")
}

// withoutKeys returns a copy of m without the keys drop.
func withoutKeys(m map[string]any, drop ...string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !slices.Contains(drop, k) {
			out[k] = v
		}
	}
	return out
}

// githubStandIn is GitHub's issues API for one repository as the
// github.issue preset cites it: creating an issue
// (docs.github.com/rest/issues/issues#create-an-issue) answers 201 with
// id, number and html_url; listing the repository's issues
// (docs.github.com/rest/issues/issues#list-repository-issues) takes state
// (open by default), since (updated at or after), sort, direction and
// per_page (30 by default, at most 100). Every answer carries the rate
// limit headers.
type githubStandIn struct {
	standIn
	token       string
	owner, repo string

	// created counts issues created.
	created int
	issues  []map[string]any
}

func newGitHubStandIn(t *testing.T, token, owner, repo string) *githubStandIn {
	s := &githubStandIn{token: token, owner: owner, repo: repo}
	// An older issue updated now, whose body is null, as GitHub answers
	// for an issue opened without text: the match must pass over it.
	now := time.Now().UTC().Format(time.RFC3339)
	s.issues = []map[string]any{{"id": 900, "number": 1, "title": "old", "body": nil, "state": "open",
		"html_url": "https://github.com/" + owner + "/" + repo + "/issues/1", "created_at": "2020-01-01T00:00:00Z", "updated_at": now}}
	s.start(t, s.serve)
	return s
}

func (s *githubStandIn) createdCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// closeIssue closes an issue, as a maintainer would.
func (s *githubStandIn) closeIssue(number int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, is := range s.issues {
		if is["number"] == number {
			is["state"] = "closed"
			is["updated_at"] = time.Now().UTC().Format(time.RFC3339)
		}
	}
}

func (s *githubStandIn) serve(r *http.Request, body []byte) answer {
	header := map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999", "X-RateLimit-Reset": strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)}
	fail := func(status int, msg string) answer {
		return answer{status: status, header: header, body: map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest"}}
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		return fail(http.StatusUnauthorized, "Bad credentials")
	}
	if r.URL.Path != "/repos/"+s.owner+"/"+s.repo+"/issues" {
		return fail(http.StatusNotFound, "Not Found")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		var in struct {
			Title  string   `json:"title"`
			Body   *string  `json:"body"`
			Labels []string `json:"labels"`
		}
		if json.Unmarshal(body, &in) != nil || in.Title == "" {
			return fail(http.StatusUnprocessableEntity, "Validation Failed")
		}
		s.created++
		number := len(s.issues) + 1
		now := time.Now().UTC().Format(time.RFC3339)
		labels := []map[string]any{}
		for _, l := range in.Labels {
			labels = append(labels, map[string]any{"name": l})
		}
		issue := map[string]any{"id": 1000 + number, "number": number, "title": in.Title, "body": in.Body, "labels": labels, "state": "open",
			"html_url": fmt.Sprintf("https://github.com/%s/%s/issues/%d", s.owner, s.repo, number), "created_at": now, "updated_at": now}
		s.issues = append(s.issues, issue)
		return answer{status: http.StatusCreated, header: header, body: issue}
	case http.MethodGet:
		q := r.URL.Query()
		state := q.Get("state")
		if state == "" {
			state = "open"
		}
		var since time.Time
		if v := q.Get("since"); v != "" {
			var err error
			if since, err = time.Parse(time.RFC3339, v); err != nil {
				return fail(http.StatusUnprocessableEntity, "Validation Failed: since")
			}
		}
		perPage, err := strconv.Atoi(q.Get("per_page"))
		if err != nil || perPage <= 0 {
			perPage = 30
		}
		perPage = min(perPage, 100)
		out := []map[string]any{}
		for _, is := range s.issues {
			updated, _ := time.Parse(time.RFC3339, is["updated_at"].(string))
			if (state == "all" || is["state"] == state) && !updated.Before(since) {
				out = append(out, is)
			}
		}
		// Created order is number order; newest first unless asked.
		if q.Get("direction") != "asc" {
			slices.Reverse(out)
		}
		return answer{status: http.StatusOK, header: header, body: out[:min(len(out), perPage)]}
	}
	return fail(http.StatusNotFound, "Not Found")
}

// twilioStandIn is Twilio's Messages resource
// (twilio.com/docs/messaging/api/message-resource#create-a-message-resource)
// as the twilio.sms preset cites it: a POST with To, From and Body, with
// HTTP basic authentication as the account, creates a message and answers
// 201 with its sid. It takes no idempotency key: every request sends.
type twilioStandIn struct {
	standIn
	accountSID, authToken string
	// unsubscribed is a number that has replied STOP (error 21610).
	unsubscribed string

	// messages counts messages sent.
	messages int
}

var e164RE = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)

func newTwilioStandIn(t *testing.T, accountSID, authToken string) *twilioStandIn {
	s := &twilioStandIn{accountSID: accountSID, authToken: authToken, unsubscribed: "+15005550009"}
	s.start(t, s.serve)
	return s
}

func (s *twilioStandIn) messageCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messages
}

func twilioError(status, code int, msg string) answer {
	return answer{status: status, body: map[string]any{"code": code, "message": msg, "more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code), "status": status}}
}

func (s *twilioStandIn) serve(r *http.Request, body []byte) answer {
	user, pass, ok := r.BasicAuth()
	if !ok || user != s.accountSID || pass != s.authToken {
		return twilioError(http.StatusUnauthorized, 20003, "Authenticate")
	}
	if r.Method != http.MethodPost || r.URL.Path != "/2010-04-01/Accounts/"+s.accountSID+"/Messages.json" {
		return twilioError(http.StatusNotFound, 20404, "The requested resource was not found")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return twilioError(http.StatusBadRequest, 21601, "Invalid parameters")
	}
	to, from, text := form.Get("To"), form.Get("From"), form.Get("Body")
	switch {
	case to == "":
		return twilioError(http.StatusBadRequest, 21604, "A 'To' phone number is required.")
	case from == "":
		return twilioError(http.StatusBadRequest, 21603, "A 'From' phone number is required.")
	case text == "":
		return twilioError(http.StatusBadRequest, 21602, "Message body is required.")
	case !e164RE.MatchString(to):
		return twilioError(http.StatusBadRequest, 21211, "Invalid 'To' Phone Number")
	case to == s.unsubscribed:
		return twilioError(http.StatusBadRequest, 21610, "Attempt to send to unsubscribed recipient")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.messages++
	sid := fmt.Sprintf("SM%032x", s.messages)
	return answer{status: http.StatusCreated, body: map[string]any{"sid": sid, "account_sid": s.accountSID, "to": to, "from": from, "body": text,
		"status": "queued", "direction": "outbound-api", "num_segments": "1", "api_version": "2010-04-01",
		"uri": "/2010-04-01/Accounts/" + s.accountSID + "/Messages/" + sid + ".json"}}
}

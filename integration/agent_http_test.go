package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/outbox-dev/outbox/outbox"
)

// agentAnswer is what an agent got from one call of serve's HTTP API.
type agentAnswer struct {
	// Status is the HTTP status, 0 when no answer came (Err).
	Status int
	// Intent is the answered intent, for a 2xx.
	Intent *outbox.Intent
	// Duplicate is the enqueue's "duplicate".
	Duplicate bool
	// Code is the error code of a 4xx or 5xx answer.
	Code string
	// Err is the transport's error: the outcome is unknown.
	Err error
	// RetryAfter is the answer's Retry-After header, "" when none.
	RetryAfter string
}

// ok reports a 2xx answer.
func (a agentAnswer) ok() bool { return a.Status >= 200 && a.Status < 300 }

// agentCall sends one request to serve at addr and decodes its answer.
func agentCall(ctx context.Context, client *http.Client, method, addr, path string, header http.Header, body any) agentAnswer {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return agentAnswer{Err: err}
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, r)
	if err != nil {
		return agentAnswer{Err: err}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return agentAnswer{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return agentAnswer{Status: resp.StatusCode, Err: err}
	}
	a := agentAnswer{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	if a.ok() {
		var ans struct {
			outbox.Intent
			Duplicate bool `json:"duplicate"`
		}
		if err := json.Unmarshal(b, &ans); err != nil {
			return agentAnswer{Status: resp.StatusCode, Err: fmt.Errorf("decoding %s: %w", b, err)}
		}
		a.Intent, a.Duplicate = &ans.Intent, ans.Duplicate
		return a
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	a.Code = e.Error.Code
	return a
}

// agentEnqueue is POST /v1/intents with the key.
func agentEnqueue(ctx context.Context, client *http.Client, addr, key, effect string, args any) agentAnswer {
	return agentCall(ctx, client, http.MethodPost, addr, "/v1/intents",
		http.Header{"Idempotency-Key": {key}}, map[string]any{"effect": effect, "args": args})
}

// agentGet is GET /v1/intents/{key}, waiting up to wait for a terminal state.
func agentGet(ctx context.Context, client *http.Client, addr, key string, wait time.Duration) agentAnswer {
	path := "/v1/intents/" + url.PathEscape(key)
	if wait > 0 {
		path += "?wait=" + wait.String()
	}
	return agentCall(ctx, client, http.MethodGet, addr, path, nil, nil)
}

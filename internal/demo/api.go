package demo

// The story's calls to outbox's HTTP API, as an agent makes them.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/outbox-dev/outbox/outbox"
)

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
		return fmt.Sprintf("%d intent %d recorded; %s after %s", a.status, a.Intent.ID, a.Intent.State, ClientTimeout)
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
func (s *Story) enqueue(ctx context.Context, key, effect string, args any) (*apiAnswer, error) {
	body, err := json.Marshal(map[string]any{"effect": effect, "args": args, "requested_by": "demo-agent"})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.env.BaseURL+"/v1/intents", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return s.api(req)
}

// get reads the intent, waiting up to wait for it to be terminal.
func (s *Story) get(ctx context.Context, key string, wait time.Duration) (*apiAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		s.env.BaseURL+"/v1/intents/"+url.PathEscape(key)+"?wait="+wait.String(), nil)
	if err != nil {
		return nil, err
	}
	return s.api(req)
}

func (s *Story) api(req *http.Request) (*apiAnswer, error) {
	if s.env.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.env.Token)
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

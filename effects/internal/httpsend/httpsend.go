package httpsend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outbox-dev/outbox/effects"
)

// ResponseBodyMax bounds how much of a provider's answer is read.
const ResponseBodyMax = 1 << 20

// Probe records what happened to the requests sent with its context.
type Probe struct {
	mu      sync.Mutex
	traced  bool
	written bool
	status  int
}

// Written reports whether a request was written out in full. Until it was,
// the provider cannot have acted on it: a provider acts on a whole request.
// A request that did not go through a Transport counts as written: nothing
// is known, so the safe answer.
func (p *Probe) Written() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.written || !p.traced
}

// Status is the status of the last response received, or 0.
func (p *Probe) Status() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

type probeKey struct{}

// WithProbe returns a context whose requests, sent through a Transport, are
// recorded in the returned Probe.
func WithProbe(ctx context.Context) (context.Context, *Probe) {
	p := &Probe{}
	return context.WithValue(ctx, probeKey{}, p), p
}

// Transport records requests in the Probe of their context, if any.
type Transport struct {
	// Base performs the requests.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p, _ := req.Context().Value(probeKey{}).(*Probe)
	if p != nil {
		p.mu.Lock()
		p.traced = true
		p.mu.Unlock()
		trace := &httptrace.ClientTrace{
			WroteRequest: func(info httptrace.WroteRequestInfo) {
				if info.Err == nil {
					p.mu.Lock()
					p.written = true
					p.mu.Unlock()
				}
			},
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	}
	resp, err := t.Base.RoundTrip(req)
	if p != nil && resp != nil {
		p.mu.Lock()
		p.status = resp.StatusCode
		p.mu.Unlock()
	}
	return resp, err
}

// Wrap returns a copy of client whose transport records requests in their
// Probe, so that any client an effect is given tells "not sent" apart, and
// makes each request a client span.
func Wrap(client *http.Client) *http.Client {
	if _, ok := client.Transport.(*Transport); ok {
		return client
	}
	c := *client
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = &Transport{Base: traced(base)}
	return &c
}

// NewClient returns an HTTP client for a provider: no overall timeout (the
// attempt's context is the deadline), no redirects followed (a provider that
// redirects a POST is misconfigured, and a webhook must not be steered to
// another address), and connections kept for up to maxConns concurrent
// calls. Each request is a client span of the attempt's trace.
func NewClient(maxConns int) *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = max(maxConns, 2)
	base.ResponseHeaderTimeout = 0
	return &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &Transport{Base: traced(base)},
	}
}

// Response is a provider's answer, read in full (up to ResponseBodyMax).
type Response struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

// Do sends req with client and reads the answer. A failure is classified:
// not sent when the request was not written out in full, ambiguous after.
// provider names the provider in messages ("zendesk", "webhook orders").
func Do(client *http.Client, req *http.Request, provider string) (*Response, error) {
	ctx, probe := WithProbe(req.Context())
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		return nil, TransportError(err, probe, provider)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, ResponseBodyMax))
	if err != nil {
		// The provider answered, and so acted or refused; which one was
		// lost with the rest of the answer, unless the status says.
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return nil, effects.Ambiguous("connection_lost", fmt.Errorf("%s: answered %d, then the connection failed: %w", provider, resp.StatusCode, cause(err)))
		}
	}
	return &Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// TransportError classifies a failed request: not sent when probe saw no
// request written out in full, else ambiguous ("timeout" when the deadline
// passed, "connection_lost" otherwise).
func TransportError(err error, probe *Probe, provider string) error {
	c := cause(err)
	if !probe.Written() {
		return effects.NotSent("connection_failed", fmt.Errorf("%s: request not sent: %w", provider, c))
	}
	if isTimeout(err) {
		return effects.Ambiguous("timeout", fmt.Errorf("%s: no answer before the deadline after the request was sent: %w", provider, c))
	}
	return effects.Ambiguous("connection_lost", fmt.Errorf("%s: connection failed after the request was sent: %w", provider, c))
}

// cause strips the *url.Error around err, whose message quotes the URL.
func cause(err error) error {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err
	}
	return err
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// StatusError classifies a provider's non-2xx status by the rules most
// providers document: 429 and 503 mean the request was not processed (not
// sent); other 4xx are definitive refusals (permanent); other 5xx and
// anything unexpected may have been processed (ambiguous). Effects whose
// provider documents otherwise decide before calling it. detail is appended
// to the message: the provider's own explanation, free of secrets.
func StatusError(status int, provider, detail string) error {
	msg := fmt.Sprintf("%s: answered %d %s", provider, status, http.StatusText(status))
	if detail != "" {
		msg += ": " + detail
	}
	err := errors.New(msg)
	switch {
	case status == http.StatusTooManyRequests:
		return effects.NotSent("rate_limited", err)
	case status == http.StatusServiceUnavailable:
		return effects.NotSent("unavailable", err)
	case status >= 400 && status < 500:
		return effects.Permanent(fmt.Sprintf("http_%d", status), err)
	case status >= 500:
		return effects.Ambiguous("provider_error", err)
	}
	return effects.Ambiguous("unexpected_status", err)
}

// WithRetryAfter adds the provider's Retry-After (seconds, or an HTTP date)
// to a not-sent error of StatusError, so that the worker waits as long as
// asked without spending an attempt. Other errors, and answers without a
// usable Retry-After, are returned as they are.
func WithRetryAfter(err error, header http.Header) error {
	var e *effects.Error
	if !errors.As(err, &e) || e.Class != effects.ClassNotSent {
		return err
	}
	d := ParseRetryAfter(header.Get("Retry-After"), time.Now())
	if d <= 0 {
		return err
	}
	return effects.NotSentRetryAfter(e.Code, e.Err, d)
}

// ParseRetryAfter reads a Retry-After value: a number of seconds or an HTTP
// date. It returns zero for an empty, malformed or past value.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		// Bounded before the multiplication can overflow; the worker caps
		// the wait far lower anyway.
		return time.Duration(min(max(secs, 0), 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Truncate shortens a provider's message for an intent's error.
func Truncate(s string, n int) string {
	s = string(bytes.ToValidUTF8([]byte(s), nil))
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "..."
}

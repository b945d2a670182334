package access

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of a FailureLimiter: ten wrong credentials in a row from one
// address, then one every six seconds. A person who mistyped a password
// never meets the limit; a guesser gets ten tries a minute, which makes a
// 16-character password or token hopeless to guess.
const (
	FailureBurstDefault = 10
	FailureEveryDefault = 6 * time.Second
)

// failureLimiterMax bounds the addresses remembered; beyond it the oldest
// full buckets (addresses that stopped failing) are forgotten first.
const failureLimiterMax = 10000

// FailureLimiter slows the guessing of credentials: each remote address may
// present wrong credentials (an API token, a console sign-in, River UI's
// basic auth) a burst of times, then one per interval. It is shared by
// every listener of a process, so a guesser cannot spread tries across
// the API, the console and River UI.
type FailureLimiter struct {
	every time.Duration
	burst int

	mu    sync.Mutex
	addrs map[string]*rate.Limiter
}

// NewFailureLimiter returns a limiter of burst failures, then one every
// interval, per address; zero values take the defaults.
func NewFailureLimiter(every time.Duration, burst int) *FailureLimiter {
	if every <= 0 {
		every = FailureEveryDefault
	}
	if burst <= 0 {
		burst = FailureBurstDefault
	}
	return &FailureLimiter{every: every, burst: burst, addrs: map[string]*rate.Limiter{}}
}

// Wait is how long addr must wait before presenting credentials again:
// zero while it has failures left.
func (l *FailureLimiter) Wait(addr string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.addrs[addr]
	if !ok {
		return 0
	}
	now := time.Now()
	if tokens := lim.TokensAt(now); tokens < 1 {
		return time.Duration((1 - tokens) * float64(l.every))
	}
	return 0
}

// Failed spends one of addr's failures.
func (l *FailureLimiter) Failed(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.addrs[addr]
	if !ok {
		if len(l.addrs) >= failureLimiterMax {
			now := time.Now()
			for a, other := range l.addrs {
				if other.TokensAt(now) >= float64(l.burst) {
					delete(l.addrs, a)
				}
			}
		}
		lim = rate.NewLimiter(rate.Every(l.every), l.burst)
		l.addrs[addr] = lim
	}
	lim.Allow()
}

// RemoteHost is a request's remote address without its port: what a
// FailureLimiter counts by.
func RemoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

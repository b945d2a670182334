package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/outbox-dev/outbox/outbox"
)

// RateLimit is a token bucket on each API token's enqueues: PerSecond
// enqueues a second on average, Burst at once. The zero value is off.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// String gives the limit in OUTBOX_RATE_LIMIT's form (cli.ParseRateLimit).
func (l RateLimit) String() string {
	if l.PerSecond <= 0 {
		return "off"
	}
	return strconv.FormatFloat(l.PerSecond, 'g', -1, 64) + ":" + strconv.Itoa(l.Burst)
}

// RateLimiter holds one bucket per principal, shared by the API's enqueues
// and /mcp's mutating calls (mcpserver.Config's RateLimitFunc is its Take),
// so that a token's rate is one whichever way it enqueues. Their number is
// bounded by the configured tokens (or the one principal of the open mode),
// so none is ever dropped. It is safe for concurrent use.
type RateLimiter struct {
	limit RateLimit
	mu    sync.Mutex
	byKey map[string]*rate.Limiter
}

// NewRateLimiter returns a limiter of limit for each principal; the zero
// RateLimit limits nothing.
func NewRateLimiter(limit RateLimit) *RateLimiter {
	return &RateLimiter{limit: limit, byKey: map[string]*rate.Limiter{}}
}

// Take spends one request of name's bucket, or tells how long to wait for
// one; a refused request spends nothing. A nil RateLimiter limits nothing.
func (l *RateLimiter) Take(name string) (time.Duration, bool) {
	if l == nil || l.limit.PerSecond <= 0 {
		return 0, true
	}
	l.mu.Lock()
	lim, ok := l.byKey[name]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(l.limit.PerSecond), l.limit.Burst)
		l.byKey[name] = lim
	}
	l.mu.Unlock()
	r := lim.Reserve()
	if delay := r.Delay(); delay > 0 {
		r.Cancel()
		return delay, false
	}
	return 0, true
}

// errRateLimited is the answer to a request beyond its token's rate.
func errRateLimited(retryAfter time.Duration) error {
	seconds := retryAfterSeconds(retryAfter)
	return &apiError{status: http.StatusTooManyRequests, code: outbox.CodeRateLimited, retryAfter: seconds,
		message: fmt.Sprintf("this token's enqueues are beyond OUTBOX_RATE_LIMIT; retry after %d s", seconds)}
}

// retryAfterSeconds rounds a wait up to Retry-After's whole seconds.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// limited refuses an enqueue beyond its principal's rate, before it reads the
// body.
func (h *Handler) limited(fn apiFunc) apiFunc {
	return func(w http.ResponseWriter, r *http.Request, namespace string) error {
		p, _ := principalFrom(r.Context())
		if wait, ok := h.limiter.Take(p.name); !ok {
			return errRateLimited(wait)
		}
		return fn(w, r, namespace)
	}
}

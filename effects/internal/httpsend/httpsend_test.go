package httpsend

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
)

func TestTransportError(t *testing.T) {
	t.Parallel()

	t.Run("RefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		url := "http://" + l.Addr().String() + "/x?token=SECRET"
		l.Close()
		req, err := http.NewRequest(http.MethodPost, url, nil)
		require.NoError(t, err)
		_, err = Do(NewClient(1), req, "provider")
		class, code := effects.Classify(err)
		require.Equal(t, effects.ClassNotSent, class, "error: %v", err)
		require.Equal(t, "connection_failed", code)
		require.NotContains(t, err.Error(), "SECRET")
	})

	t.Run("TimeoutAfterSendingIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		require.NoError(t, err)
		_, err = Do(NewClient(1), req, "provider")
		class, code := effects.Classify(err)
		require.Equal(t, effects.ClassAmbiguous, class, "error: %v", err)
		require.Equal(t, "timeout", code)
	})

	t.Run("UntracedIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		// A request that went through some other transport: whether it was
		// written is unknown, so it may have been.
		_, probe := WithProbe(context.Background())
		err := TransportError(errors.New("connection refused"), probe, "provider")
		class, _ := effects.Classify(err)
		require.Equal(t, effects.ClassAmbiguous, class)
	})

	t.Run("WrapKeepsTheClient", func(t *testing.T) {
		t.Parallel()
		c := &http.Client{Timeout: time.Minute}
		w := Wrap(c)
		require.Equal(t, time.Minute, w.Timeout)
		require.IsType(t, &Transport{}, w.Transport)
		require.Nil(t, c.Transport, "the given client is not changed")
		require.Same(t, w, Wrap(w))
	})
}

func TestStatusError(t *testing.T) {
	t.Parallel()
	for status, class := range map[int]effects.Class{
		429: effects.ClassNotSent, 503: effects.ClassNotSent,
		400: effects.ClassPermanent, 401: effects.ClassPermanent, 404: effects.ClassPermanent, 409: effects.ClassPermanent, 422: effects.ClassPermanent,
		500: effects.ClassAmbiguous, 502: effects.ClassAmbiguous, 504: effects.ClassAmbiguous, 302: effects.ClassAmbiguous,
	} {
		got, _ := effects.Classify(StatusError(status, "p", ""))
		require.Equal(t, class, got, "status %d", status)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              0,
		"30":                            30 * time.Second,
		" 5 ":                           5 * time.Second,
		"0":                             0,
		"-3":                            0,
		"99999999999999":                24 * time.Hour,
		"soon":                          0,
		"Wed, 02 Dec 2026 12:01:30 GMT": 90 * time.Second,
		"Wed, 02 Dec 2026 11:00:00 GMT": 0,
	} {
		require.Equal(t, want, ParseRetryAfter(in, now), in)
	}

	header := http.Header{"Retry-After": {"7"}}
	for status, want := range map[int]time.Duration{
		http.StatusTooManyRequests:     7 * time.Second,
		http.StatusServiceUnavailable:  7 * time.Second,
		http.StatusBadGateway:          0, // ambiguous: the retry follows the guarantee
		http.StatusUnprocessableEntity: 0,
	} {
		err := WithRetryAfter(StatusError(status, "provider", ""), header)
		require.Equal(t, want, effects.RetryAfterOf(err), status)
		class, _ := effects.Classify(err)
		require.Equal(t, status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable, class == effects.ClassNotSent, status)
	}
}

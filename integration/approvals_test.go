package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// approvalReceiver is a Slack bot's stand-in: an HTTP server on loopback
// that checks each approval notice with the official Standard Webhooks
// library and keeps the notices it accepted.
type approvalReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	notices  []workers.ApprovalNotice
	ids      map[string]int
	rejected int
}

func newApprovalReceiver(t *testing.T, secret string) *approvalReceiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	r := &approvalReceiver{ids: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := wh.Verify(body, req.Header); err != nil {
			r.rejected++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var n workers.ApprovalNotice
		if err := json.Unmarshal(body, &n); err != nil {
			r.rejected++
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		// A receiver that dedupes on webhook-id shows each notice once.
		if r.ids[req.Header.Get("webhook-id")]++; r.ids[req.Header.Get("webhook-id")] == 1 {
			r.notices = append(r.notices, n)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *approvalReceiver) waitNotice(t *testing.T, key string, timeout time.Duration) workers.ApprovalNotice {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for _, n := range r.notices {
			if n.Key == key {
				r.mu.Unlock()
				return n
			}
		}
		r.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no approval notice for %s within %s", key, timeout)
	return workers.ApprovalNotice{}
}

// Approvals survive a kill -9 of serve between the enqueue and the
// approval, and an approval that names other arguments releases nothing.
// The operator is told by a signed webhook, checked with the official
// Standard Webhooks library; the charge happens once, counted at the
// Stripe stand-in.
func TestApprovalSurvivesKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProviderEnv(t, true)
	receiver := newApprovalReceiver(t, p.sb.Webhooks.Secret())
	hooks := "hook=" + p.sb.Webhooks.EndpointURL("hook", true) + ";dedupe,approvals=" + receiver.URL + ";dedupe"
	vars := []string{"OUTBOX_WEBHOOKS=" + hooks, "OUTBOX_APPROVAL=charge:amount>=10000", "OUTBOX_APPROVAL_WEBHOOK=approvals"}

	first := p.serve(vars...)
	args := map[string]any{"customer": "cus_1", "amount": 25000, "currency": "usd", "payment_method": "pm_card_visa"}
	intent := p.enqueue(t, "big-charge", "charge", args)
	require.Equal(t, outbox.StateAwaitingApproval, intent.State)
	require.Equal(t, "charge:amount>=10000", *intent.ApprovalRule)
	small := p.enqueue(t, "small-charge", "charge", map[string]any{"customer": "cus_1", "amount": 500, "currency": "usd", "payment_method": "pm_card_visa"})
	require.Equal(t, outbox.StatePending, small.State)

	notice := receiver.waitNotice(t, "big-charge", 30*time.Second)
	require.Equal(t, intent.ArgsSHA256, notice.ArgsSHA)
	require.Equal(t, "charge:amount>=10000", notice.Rule)
	require.Equal(t, "charge", notice.Effect)
	require.Equal(t, p.wait("small-charge", 30*time.Second).State, outbox.StateSucceeded)
	first.kill9()

	// While no serve runs: an approval of other arguments is refused and
	// changes nothing.
	other := outbox.ArgsSHA256(json.RawMessage(`{"customer": "cus_1", "amount": 250, "currency": "usd", "payment_method": "pm_card_visa"}`))
	_, err := p.client.Approve(ctx, &outbox.ApprovalParams{Key: "big-charge", ArgsSHA256: other, By: "mallory"})
	require.ErrorIs(t, err, outbox.ErrApprovalMismatch)

	p.serve(vars...)
	// The new process announces nothing twice, and runs nothing unapproved.
	current, err := p.client.Get(ctx, "", "big-charge")
	require.NoError(t, err)
	require.Equal(t, outbox.StateAwaitingApproval, current.State)
	require.Nil(t, current.JobID, "no River job before approval")

	approved, err := p.client.Approve(ctx, &outbox.ApprovalParams{Key: "big-charge", ArgsSHA256: notice.ArgsSHA, By: "alice", Note: "called the customer"})
	require.NoError(t, err)
	require.Equal(t, outbox.StatePending, approved.State)
	done := p.waitIntent(t, "big-charge", 60*time.Second)
	require.Equal(t, outbox.StateSucceeded, done.State)
	require.Equal(t, 1, p.sb.Stripe.EffectsFor(done.ProviderKey), "one charge for the approved intent")
	require.Equal(t, 2, p.sb.Stripe.Effects(), "the small charge and the approved one")

	receiver.mu.Lock()
	defer receiver.mu.Unlock()
	require.Zero(t, receiver.rejected, "every notice verified")
	require.Len(t, receiver.notices, 1, "one notice, whatever the restarts")
}

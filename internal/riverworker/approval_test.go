package riverworker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/webhook"
	"github.com/outbox-dev/outbox/internal/riverworker"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// TestExpireApprovals: an intent unanswered for longer than the TTL ends
// cancelled with approval_expired, counted; a younger one keeps waiting.
func TestExpireApprovals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, effects.GuaranteeDeduplicated, nil)
	_, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "young", Effect: "test", Args: map[string]any{}, RequireApproval: true})
	require.NoError(t, err)
	b.intent(t, "old", &testfactory.IntentOpts{
		ApprovalRule: testfactory.Ptr("requested"),
		CreatedAt:    testfactory.Ptr(time.Now().Add(-2 * time.Hour)),
		State:        outbox.StateAwaitingApproval,
	})

	reg, err := effects.NewRegistry(b.effect)
	require.NoError(t, err)
	reconciler, err := riverworker.NewReconcileWorker(b.pool, &riverworker.ReconcileWorkerConfig{
		ApprovalTTL: time.Hour, Effects: reg, Metrics: b.metrics, Schema: b.schema,
	})
	require.NoError(t, err)
	n, err := reconciler.ExpireApprovals(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, 1.0, testutil.ToFloat64(b.metrics.Approvals.WithLabelValues("expired")))

	old := b.get(t, "old")
	require.Equal(t, outbox.StateCancelled, old.State)
	require.Equal(t, "approval_expired", old.Error.Code)
	require.Equal(t, "not approved within 1h0m0s", old.Error.Message)
	require.Equal(t, outbox.StateAwaitingApproval, b.get(t, "young").State)

	n, err = reconciler.ExpireApprovals(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestApprovalNotice sends the notice through the real webhook effect to a
// receiver on loopback: signed, with the intent's args_sha256 and rule, and
// the same webhook-id on a retry.
func TestApprovalNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, effects.GuaranteeDeduplicated, nil)

	var (
		mu       sync.Mutex
		requests []*http.Request
		bodies   [][]byte
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		requests, bodies = append(requests, r), append(bodies, body)
		mu.Unlock()
	}))
	t.Cleanup(receiver.Close)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	hook, err := webhook.New(&webhook.Config{Endpoints: []webhook.Endpoint{{Name: "approvals", URL: receiver.URL, Dedupe: true}}, Secret: secret})
	require.NoError(t, err)

	_, err = riverworker.NewApprovalNoticeWorker(b.pool, &riverworker.ApprovalNoticeWorkerConfig{Endpoint: "nowhere", TTL: time.Hour, Webhook: hook, Schema: b.schema})
	var argErr *effects.ArgError
	require.ErrorAs(t, err, &argErr, "an endpoint the webhook effect does not know")
	require.Equal(t, "endpoint", argErr.Field)
	w, err := riverworker.NewApprovalNoticeWorker(b.pool, &riverworker.ApprovalNoticeWorkerConfig{Endpoint: "approvals", TTL: time.Hour, Webhook: hook, Schema: b.schema})
	require.NoError(t, err)

	res, err := b.client.EnqueueTx(ctx, b.pool, &outbox.EnqueueParams{Key: "big", Effect: "test", Args: map[string]any{"amount": 20000}, RequireApproval: true})
	require.NoError(t, err)
	job := &river.Job[workers.ApprovalNoticeArgs]{JobRow: &rivertype.JobRow{Attempt: 1}, Args: workers.ApprovalNoticeArgs{IntentID: res.Intent.ID}}
	require.NoError(t, w.Work(ctx, job))
	job.Attempt = 2
	require.NoError(t, w.Work(ctx, job))

	mu.Lock()
	require.Len(t, requests, 2)
	require.Equal(t, requests[0].Header.Get("webhook-id"), requests[1].Header.Get("webhook-id"), "one webhook-id for every retry")
	require.Equal(t, "approval_"+res.Intent.ProviderKey, requests[0].Header.Get("webhook-id"))
	key, err := webhook.ParseSecret(secret)
	require.NoError(t, err)
	var ts int64
	require.NoError(t, json.Unmarshal([]byte(requests[0].Header.Get("webhook-timestamp")), &ts))
	require.Equal(t, webhook.Sign(key, requests[0].Header.Get("webhook-id"), ts, bodies[0]), requests[0].Header.Get("webhook-signature"))
	var notice workers.ApprovalNotice
	require.NoError(t, json.Unmarshal(bodies[0], &notice))
	mu.Unlock()
	require.Equal(t, workers.ApprovalNoticeType, notice.Type)
	require.Equal(t, res.Intent.ArgsSHA256, notice.ArgsSHA)
	require.Equal(t, outbox.ApprovalRequested, notice.Rule)
	require.Equal(t, "big", notice.Key)
	require.WithinDuration(t, res.Intent.CreatedAt.Add(time.Hour), notice.ExpiresAt, time.Second)

	// Once decided, nobody needs telling.
	_, err = b.client.Deny(ctx, &outbox.ApprovalParams{Key: "big", ArgsSHA256: res.Intent.ArgsSHA256})
	require.NoError(t, err)
	require.NoError(t, w.Work(ctx, job))
	mu.Lock()
	require.Len(t, requests, 2)
	mu.Unlock()
}

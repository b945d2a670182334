package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
)

// A replica paused (SIGSTOP) mid-call past its lease, while a second replica
// takes the reconcilable intent over and its own request is still at the
// provider, comes back: its stale write is rejected and counted, and it must
// not complete the River job the other attempt still needs. The second
// attempt's request hangs and times out (ambiguous); if the stale attempt
// had completed the job, River would ignore that attempt's retry and the
// intent would stay running forever. The reconciler is held off (an hour),
// so that only the worker's own rule is tested.
func TestStaleAttemptDoesNotStrandItsIntent(t *testing.T) {
	t.Parallel()
	// Request 1 (A's) and request 2 (B's) hang without creating the ticket,
	// each until its client gives up; request 3 creates it.
	p, a, intent := pausedTakeOver(t, "stale-1", sandbox.Fault{Kind: sandbox.FaultHangBefore}, sandbox.Fault{Kind: sandbox.FaultHangBefore})
	zendesk := p.sb.Zendesk
	// A comes back while B's request hangs: its deadline has long passed,
	// its outcome is ambiguous, and its fenced write is rejected.
	a.signal(syscall.SIGCONT)
	a.waitFor("stale attempt's write rejected", 30*time.Second)

	final := p.waitIntent(t, "stale-1", 120*time.Second)
	require.Equal(t, outbox.StateSucceeded, final.State, "intent: %+v", final)
	require.Equal(t, 1, zendesk.EffectsFor(intent.ProviderKey), "tickets created")
	require.Equal(t, 1, zendesk.Effects(), "tickets created, all keys")
	requests := zendesk.RequestsFor(intent.ProviderKey)
	require.GreaterOrEqual(t, requests, 3)
	t.Logf("stale attempt: 1 intent, %d requests, 1 ticket, 0 duplicates, 0 lost, attempts %d", requests, final.Attempts)
}

// The duplicate a look-up exists to prevent, with two replicas. A's ticket
// create is held at the provider while A is paused (SIGSTOP) past its lease.
// B takes over, looks the ticket up (none: A's request is still held) and
// sends its own create, which the provider refuses with 503 without acting.
// A's held request then goes through at the provider, and A comes back to
// find its write stale. B's next attempt must look the ticket up again
// before sending: a not_sent answer proves only that its own request did
// nothing. Without that look-up it sends a second create, and a second
// ticket.
func TestStaleSendIsLookedUpBeforeResend(t *testing.T) {
	t.Parallel()
	// B looks up (nothing) and sends request 2, which meets the 503.
	p, a, intent := pausedTakeOver(t, "stale-resend-1", sandbox.Fault{Kind: sandbox.FaultHeldBefore}, sandbox.Fault{Kind: sandbox.FaultUnavailable})
	zendesk := p.sb.Zendesk
	// The provider now acts on A's held request (ticket 1), before B's
	// next attempt (the 503's Retry-After is a second away), and A comes
	// back to a stale claim.
	zendesk.Release(intent.ProviderKey)
	a.signal(syscall.SIGCONT)
	a.waitFor("stale attempt's write rejected", 30*time.Second)

	final := p.waitIntent(t, "stale-resend-1", 120*time.Second)
	require.Equal(t, 1, zendesk.EffectsFor(intent.ProviderKey), "tickets created for one intent")
	require.Equal(t, outbox.StateSucceeded, final.State, "intent: %+v", final)
	t.Logf("TestStaleSendIsLookedUpBeforeResend: 1 intent, %d requests, %d ticket, 0 duplicates, attempts %d",
		zendesk.RequestsFor(intent.ProviderKey), zendesk.EffectsFor(intent.ProviderKey), final.Attempts)
}

// pausedTakeOver sets up the stale-attempt tests: replica A sends the
// ticket intent key's first request (meeting faults, one a request), is
// paused (SIGSTOP) while that request hangs at the Zendesk stand-in, and
// replica B takes the intent over once A's lease and leadership lapse (it
// rescues the job, claims the intent, looks the ticket up, and sends
// request 2). It returns once request 2 has arrived; A is still paused, and
// resumed when the test ends.
func pausedTakeOver(t *testing.T, key string, faults ...sandbox.Fault) (*providerEnv, *process, *outbox.Intent) {
	t.Helper()
	p := newProviderEnv(t, false, "OUTBOX_EFFECT_TIMEOUT=3s", "OUTBOX_RECONCILE_INTERVAL=1h")
	a := p.serve()
	intent := p.enqueueWithFaults(t, key, "ticket", effectArgs["ticket"], faults...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	zendesk := p.sb.Zendesk
	require.NoError(t, zendesk.WaitHanging(ctx, intent.ProviderKey))
	a.signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.signal(syscall.SIGCONT) })
	p.serve()
	for zendesk.RequestsFor(intent.ProviderKey) < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("the second replica never sent: %d requests", zendesk.RequestsFor(intent.ProviderKey))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return p, a, intent
}

// An operator cancels one job and deletes another in River UI, through River
// UI's own HTTP API, while their queue is paused: the reconciler gives both
// intents fresh jobs, and each ends succeeded with one effect.
func TestRiverUICancelAndDeleteAreRepaired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "OUTBOX_RECONCILE_INTERVAL=1s")
	srv := e.serve()
	ui := "http://" + srv.addr + "/riverui/api"
	riverUI(t, http.MethodPut, ui+"/queues/noop/pause", nil)

	keys := []string{"ui-cancelled", "ui-deleted"}
	jobs := make([]int64, len(keys))
	for i, key := range keys {
		_, err := e.client.EnqueueTx(context.Background(), e.pool, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: map[string]any{"i": i}})
		require.NoError(t, err)
		jobs[i] = waitForJob(t, e, key)
	}
	riverUI(t, http.MethodPost, ui+"/jobs/cancel", map[string]any{"ids": []string{fmt.Sprint(jobs[0])}})
	riverUI(t, http.MethodPost, ui+"/jobs/delete", map[string]any{"ids": []string{fmt.Sprint(jobs[1])}})
	riverUI(t, http.MethodPut, ui+"/queues/noop/resume", nil)

	for _, key := range keys {
		intent := e.wait(key, 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, intent.State, key)
		n, err := noop.Count(context.Background(), e.pool, e.schema, intent.ProviderKey)
		require.NoError(t, err)
		require.Equal(t, 1, n, key)
		require.NotEqual(t, jobs[0], *intent.JobID)
		require.NotEqual(t, jobs[1], *intent.JobID)
	}
	all := scalar(t, e, `SELECT count(*) FROM `+e.table("outbox_noop_effect"))
	require.Equal(t, len(keys), all, "effects, all keys")
	metrics := httpGet(t, "http://"+srv.addr+"/metrics")
	require.Contains(t, metrics, `outbox_reconciled_total{reason="job_cancelled"} 1`)
	require.Contains(t, metrics, `outbox_reconciled_total{reason="job_missing"} 1`)
	t.Logf("River UI: 2 intents, 2 effects, 0 duplicates, 0 lost, 2 repairs")
}

// kill -9 mid-charge: the charge is made, its answer never arrives, and the
// job is rescued and retried. The intent stays pending all along (a
// deduplicated effect is not claimed), yet a cancel, tried from the kill to
// the end, is always refused, including while the rescued job waits to be
// retried: the provider may have acted. It ends with one charge.
func TestCancelRefusedAfterKillMidCharge(t *testing.T) {
	t.Parallel()
	p := newProviderEnv(t, false)
	first := p.serve()
	intent := p.enqueueWithFaults(t, "charge-1", "charge", effectArgs["charge"], sandbox.Fault{Kind: sandbox.FaultHangAfter})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	require.NoError(t, p.sb.Stripe.WaitHanging(ctx, intent.ProviderKey))
	first.kill9()
	require.Equal(t, 1, p.sb.Stripe.EffectsFor(intent.ProviderKey), "charged before the kill")

	// The rescue, written directly rather than caught by polling: the dead
	// attempt's job made retryable with its retry an hour off, as a rescuer
	// leaves it, the intent still pending. A cancel then is refused: the
	// provider may have acted. Then the retry is due, and a replica starts.
	var tries, whileNotRunning int
	current, err := p.client.Get(ctx, "", "charge-1")
	require.NoError(t, err)
	require.NotNil(t, current.JobID)
	_, err = p.pool.Exec(ctx, `UPDATE `+p.table("river_job")+` SET state = 'retryable', scheduled_at = now() + interval '1 hour' WHERE id = $1`, *current.JobID)
	require.NoError(t, err)
	_, err = p.client.Cancel(ctx, &outbox.CancelParams{Key: "charge-1"})
	require.ErrorIs(t, err, outbox.ErrNotCancellable, "a cancel while the rescued job waited for its retry")
	tries, whileNotRunning = 1, 1
	_, err = p.pool.Exec(ctx, `UPDATE `+p.table("river_job")+` SET scheduled_at = now() WHERE id = $1`, *current.JobID)
	require.NoError(t, err)

	p.serve()
	for {
		current, err := p.client.Get(ctx, "", "charge-1")
		require.NoError(t, err)
		if current.State.Terminal() {
			require.Equal(t, outbox.StateSucceeded, current.State)
			break
		}
		var jobState string
		require.NoError(t, p.pool.QueryRow(ctx, `SELECT state FROM `+p.table("river_job")+` WHERE id = $1`, *current.JobID).Scan(&jobState))
		_, err = p.client.Cancel(ctx, &outbox.CancelParams{Key: "charge-1"})
		require.ErrorIs(t, err, outbox.ErrNotCancellable, "a cancel while the job was %s", jobState)
		tries++
		if jobState != "running" {
			whileNotRunning++
		}
		select {
		case <-ctx.Done():
			t.Fatal("the charge never ended")
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.Positive(t, whileNotRunning, "no cancel was tried while the rescued job waited for its retry")
	require.Equal(t, 1, p.sb.Stripe.EffectsFor(intent.ProviderKey), "charges")
	require.Equal(t, 1, p.sb.Stripe.Effects(), "charges, all keys")
	t.Logf("kill mid-charge: 1 intent, 1 charge, %d cancels refused (%d while the job was not running), 0 duplicates", tries, whileNotRunning)
}

// A replica without charge, next to charges enqueued by raw SQL, leaves them
// pending (it neither fails nor dispatches them); once a replica with charge
// runs, each succeeds with one charge.
func TestReplicaWithoutAnEffectLeavesItsIntents(t *testing.T) {
	t.Parallel()
	p := newProviderEnv(t, false, "OUTBOX_RECONCILE_INTERVAL=1s")
	without := p.serve("OUTBOX_STRIPE_KEY=")
	without.waitFor("effect enabled", 10*time.Second)
	require.NotContains(t, without.output(), "effect=charge")

	const n = 20
	fn := pgx.Identifier{p.schema, "enqueue"}.Sanitize()
	for i := range n {
		_, err := p.pool.Exec(context.Background(), `SELECT * FROM `+fn+`('default', $1, 'charge', $2)`,
			fmt.Sprintf("sql-charge-%d", i), `{"customer": "cus_1", "amount": 500, "currency": "eur"}`)
		require.NoError(t, err)
	}
	// Long enough for many drains and reconciler runs, and for the leader's
	// warning about the effect nobody runs.
	without.waitFor("pending intents of an effect this replica does not run", 30*time.Second)
	require.Equal(t, n, scalar(t, p.env, `SELECT count(*) FROM `+p.table("outbox_intent")+` WHERE state = 'pending' AND job_id IS NULL`))

	p.serve()
	for i := range n {
		intent := p.waitIntent(t, fmt.Sprintf("sql-charge-%d", i), 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, intent.State)
		require.Equal(t, 1, p.sb.Stripe.EffectsFor(intent.ProviderKey))
	}
	require.Equal(t, n, p.sb.Stripe.Effects(), "charges, all keys")
	t.Logf("replica without charge: %d intents, 0 failed, %d charges, 0 duplicates, 0 lost", n, n)
}

// An unknown intent survives pruning, however old; a succeeded one is
// pruned. serve prunes at start, with a 1 s retention here.
func TestUnknownSurvivesPruning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "OUTBOX_RETENTION=1s")
	hourAgo := time.Now().Add(-time.Hour)
	for key, state := range map[string]outbox.State{"old-unknown": outbox.StateUnknown, "old-succeeded": outbox.StateSucceeded} {
		testfactory.Intent(context.Background(), t, e.pool, &testfactory.IntentOpts{
			CompletedAt: &hourAgo, CreatedAt: &hourAgo, JobID: testfactory.Ptr(int64(0)), Key: key,
			MaybeSent: testfactory.Ptr(state == outbox.StateUnknown), Schema: e.schema, State: state,
		})
	}
	srv := e.serve()
	srv.waitFor("pruned terminal intents past retention", 30*time.Second)

	_, err := e.client.Get(context.Background(), "", "old-succeeded")
	require.ErrorIs(t, err, outbox.ErrNotFound)
	kept, err := e.client.Get(context.Background(), "", "old-unknown")
	require.NoError(t, err)
	require.Equal(t, outbox.StateUnknown, kept.State)
}

// waitForJob waits until the drain gave the intent a River job.
func waitForJob(t *testing.T, e *env, key string) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		intent, err := e.client.Get(context.Background(), "", key)
		require.NoError(t, err)
		if intent.JobID != nil {
			return *intent.JobID
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("intent %s was never dispatched", key)
	return 0
}

// riverUI calls River UI's API as its browser front end does.
func riverUI(t *testing.T, method, url string, body any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, url, out)
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec,noctx // the test's own server
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func scalar(t *testing.T, e *env, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

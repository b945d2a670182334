package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// Statements whose commit the lost acknowledgements hit, as
// internal/intentdb writes them.
const (
	sqlMatchEnqueue = "INSERT INTO" // the enqueue; only it inserts through serve's API here
	sqlMatchDrain   = "SET job_id = u.job_id"
	sqlMatchClaim   = "SET state = 'running'"
	sqlMatchFinish  = "expect_state, expect_attempt"
)

// Lost acknowledgements: the work is done, its reply never reaches serve.
// Every PostgreSQL connection of one serve process goes through a
// Toxiproxy proxy of its own, and each stand-in provider through one
// proxy; a case arms one fault, runs one intent, and checks what happened
// over the test's direct connection and at the stand-in. First attempts run
// in batches (the default), so the deduplicated cases cover the batch
// worker.
func TestLostAcks(t *testing.T) {
	t.Parallel()
	toxi := newToxiServer(t)
	// The webhook endpoint does not dedupe: an at-most-once effect over
	// HTTP, for the provider's reset.
	p := newProviderEnv(t, false)
	front := newPGFront(t, toxi, mustHost(t, testdb.URL(t)))
	stripe, stripeURL := toxi.providerProxy(p.sb.Stripe.URL())
	zendesk, zendeskURL := toxi.providerProxy(p.sb.Zendesk.URL())
	webhooks, hookURL := toxi.providerProxy(p.sb.Webhooks.EndpointURL("hook", false))
	srv := p.serve(
		"DATABASE_URL="+front.url(testdb.URL(t)),
		"OUTBOX_STRIPE_URL="+stripeURL,
		"OUTBOX_ZENDESK_URL="+zendeskURL,
		"OUTBOX_WEBHOOKS=hook="+hookURL,
	)
	ctx := context.Background()
	httpc := &http.Client{Timeout: 10 * time.Second}
	var figures []string
	figure := func(format string, args ...any) { figures = append(figures, fmt.Sprintf(format, args...)) }

	// waitFired waits until the fault hit a transaction.
	waitFired := func(t *testing.T, a *lostAck) {
		t.Helper()
		select {
		case <-a.hit:
		case <-time.After(30 * time.Second):
			t.Fatalf("fault %s never fired: the case proves nothing", a.name)
		}
	}
	// intentsFor counts the rows of a key, over the direct connection.
	intentsFor := func(t *testing.T, key string) int {
		t.Helper()
		return scalar(t, p.env, fmt.Sprintf(`SELECT count(*) FROM %s WHERE key = '%s'`, p.table("outbox_intent"), key))
	}
	// jobsFor counts the River jobs that name an intent, alone or in a batch.
	jobsFor := func(t *testing.T, id int64) int {
		t.Helper()
		return scalar(t, p.env, fmt.Sprintf(`SELECT count(*) FROM %s WHERE (args->>'intent_id')::bigint = %d
			OR (args ? 'intent_ids' AND args->'intent_ids' @> '[%d]')`, p.table("river_job"), id, id))
	}

	// unfinishedJobsFor counts the River jobs that name an intent and may
	// still run: none left means no retry is left to call a provider.
	unfinishedJobsFor := func(t *testing.T, id int64) int {
		t.Helper()
		return scalar(t, p.env, fmt.Sprintf(`SELECT count(*) FROM %s WHERE ((args->>'intent_id')::bigint = %d
			OR (args ? 'intent_ids' AND args->'intent_ids' @> '[%d]')) AND state NOT IN ('cancelled', 'completed', 'discarded')`, p.table("river_job"), id, id))
	}

	t.Run("EnqueueCommitLost", func(t *testing.T) {
		// The agent's enqueue commits, its reply is lost, serve answers
		// an error (or nothing): the agent retries the key and gets the
		// one intent, as a duplicate.
		const key = "lost-enqueue-1"
		fault := resetBeforeCommit("enqueue", sqlMatchEnqueue, 1)
		front.arm(fault)
		defer front.disarm(fault)
		first := agentEnqueue(ctx, httpc, srv.addr, key, "charge", effectArgs["charge"])
		waitFired(t, fault)
		require.False(t, first.ok() && !first.Duplicate && first.Intent == nil, "answer: %+v", first)
		require.Equal(t, 1, intentsFor(t, key), "committed although its reply was lost")
		var retry agentAnswer
		for range 50 {
			if retry = agentEnqueue(ctx, httpc, srv.addr, key, "charge", effectArgs["charge"]); retry.ok() {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.True(t, retry.ok(), "retry: %+v", retry)
		require.True(t, retry.Duplicate, "the retry found the committed intent")
		if first.ok() {
			require.Equal(t, first.Intent.ID, retry.Intent.ID)
		}
		final := p.waitIntent(t, key, 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, final.State)
		require.Equal(t, retry.Intent.ID, final.ID)
		require.Equal(t, 1, intentsFor(t, key))
		require.Equal(t, 1, p.sb.Stripe.EffectsFor(final.ProviderKey), "charges")
		figure("enqueue commit lost: first answer %d %s %v, retry duplicate, 1 intent, 1 charge", first.Status, first.Code, first.Err)
	})

	t.Run("EnqueueCommitLate", func(t *testing.T) {
		// The enqueue's pipeline reaches PostgreSQL 3 s late, after the
		// agent gave up at 1 s: the intent is recorded all the same, and
		// the agent's retry finds it.
		const key = "late-enqueue-1"
		fault := newLostAck("late", sqlMatchEnqueue, "latency", "upstream", map[string]any{"latency": 3000}, 1)
		front.arm(fault)
		defer front.disarm(fault)
		impatient := &http.Client{Timeout: time.Second}
		first := agentEnqueue(ctx, impatient, srv.addr, key, "charge", effectArgs["charge"])
		waitFired(t, fault)
		require.Error(t, first.Err, "the agent gave up first: %+v", first)
		require.Zero(t, intentsFor(t, key), "not yet committed when the agent gave up")
		require.Eventually(t, func() bool { return intentsFor(t, key) == 1 }, 20*time.Second, 50*time.Millisecond,
			"the commit landed after the agent gave up")
		retry := agentEnqueue(ctx, httpc, srv.addr, key, "charge", effectArgs["charge"])
		require.True(t, retry.ok(), "retry: %+v", retry)
		require.True(t, retry.Duplicate)
		final := p.waitIntent(t, key, 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, final.State)
		require.Equal(t, 1, p.sb.Stripe.EffectsFor(final.ProviderKey), "charges")
		figure("enqueue commit late: agent gave up, intent recorded after, retry duplicate, 1 charge")
	})

	t.Run("DrainCommitLost", func(t *testing.T) {
		// The drain's transaction (jobs inserted, intents marked) commits,
		// its reply is lost: the next drain must not dispatch again.
		fault := resetBeforeCommit("drain", sqlMatchDrain, 1)
		front.arm(fault)
		defer front.disarm(fault)
		intent := p.enqueue(t, "lost-drain-1", "charge", effectArgs["charge"])
		waitFired(t, fault)
		final := p.waitIntent(t, intent.Key, 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, final.State)
		require.Equal(t, 1, jobsFor(t, intent.ID), "River jobs for the intent")
		require.Equal(t, 1, p.sb.Stripe.EffectsFor(intent.ProviderKey), "charges")
		figure("drain commit lost: 1 job, 1 charge")
	})

	for _, tc := range []struct {
		effect string
		state  outbox.State
	}{
		{"charge", outbox.StateSucceeded}, // deduplicated, in a batch
		{"ticket", outbox.StateSucceeded}, // reconcilable
		{"email", outbox.StateSucceeded},  // at most once
	} {
		t.Run("FinishCommitLost/"+tc.effect, func(t *testing.T) {
			// The effect was made and its outcome committed; the
			// worker never learns it. Its retry must find the intent
			// terminal, not call the provider again.
			fault := resetBeforeCommit("finish-"+tc.effect, sqlMatchFinish, 1)
			front.arm(fault)
			defer front.disarm(fault)
			intent := p.enqueue(t, "lost-finish-"+tc.effect, tc.effect, effectArgs[tc.effect])
			waitFired(t, fault)
			final := p.waitIntent(t, intent.Key, 60*time.Second)
			require.Equal(t, tc.state, final.State, "intent: %+v", final)
			// A second call would come from the retry of a job that
			// names the intent: once every one has finished, none can.
			require.Eventually(t, func() bool { return unfinishedJobsFor(t, intent.ID) == 0 }, 60*time.Second, 20*time.Millisecond)
			require.Equal(t, 1, p.standIn(tc.effect).EffectsFor(intent.ProviderKey), "effects")
			require.Equal(t, 1, p.standIn(tc.effect).RequestsFor(intent.ProviderKey), "requests: no second call")
			figure("finish commit lost (%s): %s, 1 request, 1 effect", tc.effect, final.State)
		})
	}

	t.Run("ClaimCommitLost", func(t *testing.T) {
		// An at-most-once intent's claim commits (running, lease taken)
		// and its reply is lost: the worker cannot know whether an
		// attempt went on, so the intent ends unknown, never sent.
		fault := resetBeforeCommit("claim", sqlMatchClaim, 1)
		front.arm(fault)
		defer front.disarm(fault)
		intent := p.enqueue(t, "lost-claim-1", "email", effectArgs["email"])
		waitFired(t, fault)
		final := p.waitIntent(t, intent.Key, 60*time.Second)
		require.Equal(t, outbox.StateUnknown, final.State, "intent: %+v", final)
		require.Zero(t, p.sb.SMTP.EffectsFor(intent.ProviderKey), "messages")
		require.Zero(t, p.sb.SMTP.RequestsFor(intent.ProviderKey), "never sent")
		figure("claim commit lost (email): unknown, 0 requests")
	})

	proxies := map[string]*toxiproxy.Proxy{"charge": stripe, "ticket": zendesk, "webhook": webhooks}
	for _, tc := range []struct {
		effect string
		state  outbox.State
	}{
		{"charge", outbox.StateSucceeded}, // deduplicated: retried under its key
		{"ticket", outbox.StateSucceeded}, // reconcilable: looked up
		{"webhook", outbox.StateUnknown},  // at most once: not resent
	} {
		t.Run("ProviderReset/"+tc.effect, func(t *testing.T) {
			// The request reached the stand-in, which acted; the
			// connection is reset before its answer comes back.
			prx := proxies[tc.effect]
			require.NoError(t, addToxic(prx, "reset", "reset_peer", "downstream", map[string]any{"timeout": 0}))
			removed := false
			remove := func() {
				if !removed {
					removed = true
					_ = prx.Toxics.RemoveToxic(ctx, "reset")
				}
			}
			defer remove()
			intent := p.enqueue(t, "reset-"+tc.effect, tc.effect, effectArgs[tc.effect])
			si := p.standIn(tc.effect)
			require.Eventually(t, func() bool { return si.EffectsFor(intent.ProviderKey) > 0 }, 30*time.Second, 5*time.Millisecond)
			// Long enough for the answer to meet the reset, shorter
			// than River's first backoff (a second or more).
			time.Sleep(300 * time.Millisecond)
			remove()
			final := p.waitIntent(t, intent.Key, 60*time.Second)
			require.Equal(t, tc.state, final.State, "intent: %+v", final)
			require.Equal(t, 1, si.EffectsFor(intent.ProviderKey), "effects")
			if tc.state == outbox.StateSucceeded {
				require.GreaterOrEqual(t, final.Attempts, 2, "the reset cost the first attempt: it landed")
			} else {
				require.NotNil(t, final.Error, "an unknown intent says why")
			}
			figure("provider reset (%s): %s after %d attempts, %d requests, 1 effect", tc.effect, final.State, final.Attempts, si.RequestsFor(intent.ProviderKey))
		})
	}

	t.Logf("TestLostAcks: %s; serve connections proxied %d", strings.Join(figures, "; "), front.connCount())
}

// mustHost returns a URL's host:port.
// mustHost returns the TCP address of the database at raw: its host and
// port, or, for a Unix socket (the throwaway cluster of a run without
// TEST_DATABASE_URL: host=/dir in the query), a loopback relay to the
// socket, since Toxiproxy and the front dial TCP only.
func mustHost(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	if dir := q.Get("host"); strings.HasPrefix(dir, "/") {
		port := q.Get("port")
		if port == "" {
			port = "5432"
		}
		return unixRelay(t, filepath.Join(dir, ".s.PGSQL."+port))
	}
	if u.Host != "" && u.Port() == "" {
		return u.Host + ":5432"
	}
	return u.Host
}

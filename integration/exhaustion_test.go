package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// exhaustApp is serve's application_name in TestExhaustion, so that its
// sessions can be told from the test's and the other clients'.
const exhaustApp = "outboxd_exhaust"

// TestExhaustion runs serve into real limits, one a subtest: PostgreSQL's
// disk full (the intent table on a tablespace on a small tmpfs), its
// max_connections taken by other clients, a lock on the intent table held
// longer than serve's statement timeout, and a provider answering 429 for
// a long while. Agents enqueue over HTTP throughout, retrying each key
// until it is acknowledged, as agents do. For each: what the agents got (a
// 503 unavailable with Retry-After, never a 500, never a 201 for an intent
// not stored), that every acknowledged intent is there and ends with one
// effect, that serve recovers without a restart once the limit lifts (the
// recovery time), and the metric that showed it.
func TestExhaustion(t *testing.T) {
	t.Parallel()
	t.Run("disk_full", func(t *testing.T) {
		t.Parallel()
		testDiskFull(t)
	})
	t.Run("connections", func(t *testing.T) {
		t.Parallel()
		testConnections(t)
	})
	t.Run("lock", func(t *testing.T) {
		t.Parallel()
		testLockHeld(t)
	})
	t.Run("provider_throttle", func(t *testing.T) {
		t.Parallel()
		testProviderThrottle(t)
	})
}

// exhaustEnv is serve against a throwaway cluster or the test database,
// with a deduplicating webhook endpoint at a sandbox.
type exhaustEnv struct {
	*providerEnv
	url string
}

// newClusterExhaustEnv migrates the cluster's schema outbox and returns an
// env whose serve connects as exhaustApp.
func newClusterExhaustEnv(t *testing.T, cluster *pgcluster.Cluster, extra ...string) *exhaustEnv {
	t.Helper()
	ctx := context.Background()
	const schema = "outbox"
	cfg, err := pgxpool.ParseConfig(cluster.URL())
	require.NoError(t, err)
	// Few connections of the test's own, opened now: the connections
	// subtest takes every other one away.
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	m, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	sb, err := sandbox.Start(&sandbox.Config{ZendeskEmail: "agent@example.com", ZendeskToken: "zendesk-token"})
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	url := cluster.URL() + "&application_name=" + exhaustApp
	e := &env{t: t, client: client, pool: pool, schema: schema, vars: append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + url,
		"OUTBOX_SCHEMA=" + schema,
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_ALLOW_NO_AUTH=true",
		"OUTBOX_EFFECT_TIMEOUT=1s",
		"OUTBOX_WORKERS=10",
		"OUTBOX_RECONCILE_INTERVAL=2s",
		"OUTBOX_STATEMENT_TIMEOUT=2s",
		"OUTBOX_LOCK_TIMEOUT=1s",
		"OUTBOX_WEBHOOKS=hook=" + sb.Webhooks.EndpointURL("hook", true) + ";dedupe",
		"OUTBOX_WEBHOOK_SECRET=" + sb.Webhooks.Secret(),
		"OUTBOX_ZENDESK_URL=" + sb.Zendesk.URL(),
		"OUTBOX_ZENDESK_EMAIL=agent@example.com",
		"OUTBOX_ZENDESK_TOKEN=zendesk-token",
	}, extra...)}
	return &exhaustEnv{providerEnv: &providerEnv{env: e, sb: sb}, url: url}
}

// exhaustLoad is agents enqueuing webhooks over HTTP, each key retried
// until acknowledged, and what they were answered.
type exhaustLoad struct {
	addr string
	stop chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// acked are the acknowledged keys and their intents' ids.
	acked map[string]int64
	// answers counts answers by status and code ("503 unavailable").
	answers map[string]int
	// unavailable counts 503 unavailable answers, noRetryAfter those of
	// them without a Retry-After, bad any other 5xx.
	unavailable, noRetryAfter, bad int
	// oks are the times of acknowledgements, for the recovery time.
	oks    []time.Time
	serial int
}

func startExhaustLoad(addr string, agents int) *exhaustLoad {
	l := &exhaustLoad{addr: addr, stop: make(chan struct{}), acked: map[string]int64{}, answers: map[string]int{}}
	httpc := &http.Client{Timeout: 10 * time.Second}
	for range agents {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				l.mu.Lock()
				l.serial++
				key := fmt.Sprintf("x%05d", l.serial)
				l.mu.Unlock()
				body := map[string]any{"effect": "webhook", "args": map[string]any{"endpoint": "hook", "payload": map[string]any{"key": key}}}
				for {
					select {
					case <-l.stop:
						return
					default:
					}
					ans := agentCall(context.Background(), httpc, http.MethodPost, l.addr, "/v1/intents", http.Header{"Idempotency-Key": {key}}, body)
					l.mu.Lock()
					l.answers[fmt.Sprintf("%d %s", ans.Status, ans.Code)]++
					switch {
					case ans.ok():
						l.acked[key] = ans.Intent.ID
						l.oks = append(l.oks, time.Now())
					case ans.Status == http.StatusServiceUnavailable && ans.Code == outbox.CodeUnavailable:
						l.unavailable++
						if ans.RetryAfter == "" {
							l.noRetryAfter++
						}
					case ans.Status >= 500 || ans.Err != nil:
						l.bad++
					}
					l.mu.Unlock()
					if ans.ok() {
						break
					}
					// An agent would wait the Retry-After (2 s); a fifth of
					// it keeps the load on and the recovery time precise.
					time.Sleep(400 * time.Millisecond)
				}
				// The next action a tenth of a second later: a few hundred
				// intents a subtest, enough to meet each limit and fill the
				// queue behind it. At 20 ms the subtests made 2,300 intents
				// (the throttle's 6,300 refused requests) and took 35
				// CPU-seconds on 2 cores, 23 at 100 ms, and showed nothing
				// more.
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	return l
}

// end stops the agents and waits for them.
func (l *exhaustLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// firstOKAfter is the time from t to the first acknowledgement after it.
func (l *exhaustLoad) firstOKAfter(t time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ok := range l.oks {
		if ok.After(t) {
			return ok.Sub(t)
		}
	}
	return -1
}

// unavailableCount is how many 503 unavailable answers agents had.
func (l *exhaustLoad) unavailableCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unavailable
}

// exhaustFigures are one subtest's figures.
type exhaustFigures struct {
	intents, effects, duplicates, lost, unavailable, noRetryAfter, bad int
	metric                                                             string
	recovery                                                           time.Duration
	answers                                                            map[string]int
}

// settle stops the load and checks what it left: every acknowledged
// intent stored under the id it was answered with, terminal, succeeded
// with one delivery; and no delivery for a key never acknowledged.
func (e *exhaustEnv) settle(t *testing.T, l *exhaustLoad) *exhaustFigures {
	t.Helper()
	l.end()
	f := &exhaustFigures{answers: l.answers, unavailable: l.unavailable, noRetryAfter: l.noRetryAfter, bad: l.bad}
	for key, id := range l.acked {
		f.intents++
		intent, err := e.client.Get(context.Background(), "", key)
		if errors.Is(err, outbox.ErrNotFound) || (err == nil && intent.ID != id) {
			f.lost++
			continue
		}
		require.NoError(t, err)
		intent = e.waitIntent(t, key, 90*time.Second)
		require.Equal(t, outbox.StateSucceeded, intent.State, "intent %s: %+v", key, intent)
		n := e.sb.Webhooks.EffectsFor(intent.ProviderKey)
		f.effects += n
		if n > 1 {
			f.duplicates += n - 1
		}
		require.Equal(t, 1, n, "deliveries of %s", key)
	}
	return f
}

func (f *exhaustFigures) String() string {
	return fmt.Sprintf("intents %d, effects %d, duplicates %d, lost %d, 503 unavailable %d (without Retry-After %d), other 5xx or no answer %d, recovered in %s, metric %s, answers %v",
		f.intents, f.effects, f.duplicates, f.lost, f.unavailable, f.noRetryAfter, f.bad, f.recovery.Round(10*time.Millisecond), f.metric, f.answers)
}

// check requires what every subtest of a database limit must show.
func (f *exhaustFigures) check(t *testing.T) {
	t.Helper()
	require.Positive(t, f.unavailable, "no agent was answered 503 unavailable: the limit was never met")
	require.Zero(t, f.noRetryAfter, "503 answers without Retry-After")
	require.Zero(t, f.bad, "answers other than 2xx, 4xx or 503 unavailable")
	require.Zero(t, f.lost, "acknowledged intents lost")
	require.Zero(t, f.duplicates, "duplicate effects")
	require.Positive(t, f.recovery, "no enqueue was acknowledged after the limit lifted")
}

// metricSample reads one sample, such as
// outbox_database_unavailable_total{reason="disk_full"}, from serve's
// /metrics; -1 when it is missing.
func metricSample(t *testing.T, addr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics") //nolint:gosec,noctx // the test's own server
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			require.NoError(t, err)
			return v
		}
	}
	return -1
}

// unavailableMetric requires outbox_database_unavailable_total{reason} to
// have counted the refusals, and outbox_database_errors_total{reason} at
// least as many, and returns them as the figure line shows them.
func unavailableMetric(t *testing.T, addr, reason string) string {
	t.Helper()
	sample := `outbox_database_unavailable_total{reason="` + reason + `"}`
	v := metricSample(t, addr, sample)
	require.Positive(t, v, "%s did not count the refusals", sample)
	// And every statement of the process that met the limit, the
	// workers', the drain's and River's with the API's: what the alert
	// watches.
	all := `outbox_database_errors_total{reason="` + reason + `"}`
	w := metricSample(t, addr, all)
	require.GreaterOrEqual(t, w, v, "%s did not count the errors", all)
	return fmt.Sprintf("%s=%g, %s=%g (OutboxDatabaseUnavailable)", sample, v, all, w)
}

// testDiskFull puts the intent table on a tablespace on a 16 MB tmpfs,
// fills the file system, and then frees it.
func testDiskFull(t *testing.T) {
	ctx := context.Background()
	if os.Geteuid() != 0 {
		t.Skip("disk_full mounts a small tmpfs for a tablespace, which needs root (CI runs as root)")
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Skipf("disk_full needs the postgres user to own the tablespace: %v", err)
	}
	mnt, err := os.MkdirTemp("", "outbox-diskfull-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(mnt) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o",
		fmt.Sprintf("size=16m,mode=0700,uid=%s,gid=%s", pgUser.Uid, pgUser.Gid), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("disk_full cannot mount a tmpfs (a container without CAP_SYS_ADMIN?): %v: %s", err, out)
	}
	// Registered before the cluster's cleanup, so it runs after it: the
	// server has let go of the tablespace's files by then.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", mnt, err, out)
		}
	})
	// The mount point's parent is root's 0700 temporary directory's
	// parent (/tmp): the postgres user reaches it.
	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{CrashSafe: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	e := newClusterExhaustEnv(t, cluster)
	tsDir := filepath.Join(mnt, "ts")
	require.NoError(t, os.Mkdir(tsDir, 0o700))
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	require.NoError(t, os.Chown(tsDir, uid, gid))
	_, err = e.pool.Exec(ctx, `CREATE TABLESPACE outbox_small LOCATION `+quoteLiteral(tsDir))
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `ALTER TABLE outbox.outbox_intent SET TABLESPACE outbox_small`)
	require.NoError(t, err)

	server := e.serve()
	load := startExhaustLoad(server.addr, 3)
	time.Sleep(2 * time.Second)

	// The file system filled by something else: a file as large as it
	// goes, written by root, whom tmpfs's size binds too.
	filler := filepath.Join(mnt, "filler")
	fillTmpfs(t, filler)
	fullAt := time.Now()
	require.Eventually(t, func() bool { return load.unavailableCount() > 3 }, 30*time.Second, 50*time.Millisecond,
		"no enqueue was refused with the intent table's file system full")
	time.Sleep(3 * time.Second)
	require.NoError(t, os.Remove(filler))
	freedAt := time.Now()
	require.Eventually(t, func() bool { return load.firstOKAfter(freedAt) > 0 }, 30*time.Second, 50*time.Millisecond,
		"serve did not take enqueues again once the disk had room")
	time.Sleep(time.Second)
	f := e.settle(t, load)
	f.recovery = load.firstOKAfter(freedAt)
	f.metric = unavailableMetric(t, server.addr, "disk_full")
	t.Logf("TestExhaustion/disk_full: full for %s; %s", freedAt.Sub(fullAt).Round(100*time.Millisecond), f)
	f.check(t)
	// Dropped here, so that the cluster's stop finds nothing on the tmpfs.
	_, err = e.pool.Exec(ctx, `ALTER TABLE outbox.outbox_intent SET TABLESPACE pg_default`)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `DROP TABLESPACE outbox_small`)
	require.NoError(t, err)
}

// fillTmpfs writes path until the file system is full.
func fillTmpfs(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 64*1024)
	for {
		if _, err := f.Write(buf); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	// Byte by byte for the last partial block, so that not a page is
	// left.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// testConnections gives serve a cluster of 40 connections, takes every free
// one with other clients, cuts serve's own sessions (as a pooler restart or
// a network blip would) so that it must connect again, holds that for a few
// seconds, and then lets the other clients go.
func testConnections(t *testing.T) {
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{CrashSafe: true, Settings: []string{
		"max_connections=40",
		// Every client here is a superuser: without this, the reserved
		// slots would let serve's superuser in past the others.
		"superuser_reserved_connections=0",
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	e := newClusterExhaustEnv(t, cluster)
	server := e.serve()
	load := startExhaustLoad(server.addr, 3)
	time.Sleep(2 * time.Second)

	// The test's own session, for the terminations, before there is none
	// to be had.
	admin, err := e.pool.Acquire(ctx)
	require.NoError(t, err)
	defer admin.Release()
	var hogs []*pgx.Conn
	defer func() {
		for _, c := range hogs {
			_ = c.Close(context.Background())
		}
	}()
	// hog connects until refused; a refusal must be max_connections'.
	hog := func() {
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := pgx.Connect(cctx, cluster.URL()+"&application_name=other_client")
			cancel()
			if err != nil {
				var pgErr *pgconn.PgError
				require.True(t, errors.As(err, &pgErr) && pgErr.Code == "53300", "connecting another client: %v", err)
				return
			}
			hogs = append(hogs, c)
		}
	}
	hog()
	// serve's sessions end; the other clients take their slots at once.
	var cut int
	for range 5 {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, exhaustApp).Scan(&n))
		cut += n
		hog()
		time.Sleep(100 * time.Millisecond)
	}
	fullAt := time.Now()
	require.Positive(t, cut, "serve had no session to cut")
	require.Eventually(t, func() bool { return load.unavailableCount() > 3 }, 30*time.Second, 50*time.Millisecond,
		"no enqueue was refused with every connection taken")
	time.Sleep(3 * time.Second)
	for _, c := range hogs {
		_ = c.Close(ctx)
	}
	hogs = nil
	freedAt := time.Now()
	require.Eventually(t, func() bool { return load.firstOKAfter(freedAt) > 0 }, 30*time.Second, 50*time.Millisecond,
		"serve did not take enqueues again once connections were free")
	time.Sleep(time.Second)
	f := e.settle(t, load)
	f.recovery = load.firstOKAfter(freedAt)
	f.metric = unavailableMetric(t, server.addr, "connections")
	t.Logf("TestExhaustion/connections: %d of serve's sessions cut, every connection taken for %s; %s", cut, freedAt.Sub(fullAt).Round(100*time.Millisecond), f)
	f.check(t)
}

// testLockHeld holds an ACCESS EXCLUSIVE lock on the intent table for 6 s,
// three times serve's statement timeout (2 s; its lock timeout is 1 s), as
// a migration or an operator's forgotten transaction would, while agents
// enqueue; serve's sessions must not wait on it longer than the lock
// timeout.
func testLockHeld(t *testing.T) {
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{CrashSafe: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	e := newClusterExhaustEnv(t, cluster)
	server := e.serve()
	load := startExhaustLoad(server.addr, 3)
	time.Sleep(2 * time.Second)

	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // committed below
	_, err = tx.Exec(ctx, `LOCK TABLE outbox.outbox_intent IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	lockedAt := time.Now()
	// The longest any of serve's sessions waited for a lock, sampled.
	var longestWait time.Duration
	for time.Since(lockedAt) < 6*time.Second {
		var ms float64
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - query_start)) * 1000, 0)
			FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, exhaustApp).Scan(&ms))
		longestWait = max(longestWait, time.Duration(ms)*time.Millisecond)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, tx.Commit(ctx))
	freedAt := time.Now()
	require.Eventually(t, func() bool { return load.firstOKAfter(freedAt) > 0 }, 30*time.Second, 50*time.Millisecond,
		"serve did not take enqueues again once the lock was released")
	time.Sleep(time.Second)
	f := e.settle(t, load)
	f.recovery = load.firstOKAfter(freedAt)
	f.metric = unavailableMetric(t, server.addr, "lock_timeout")
	t.Logf("TestExhaustion/lock: held for %s, longest wait of a serve session %s; %s", freedAt.Sub(lockedAt).Round(100*time.Millisecond), longestWait.Round(10*time.Millisecond), f)
	f.check(t)
	// The lock timeout (1 s) and the sampling's resolution: no session of
	// serve's was pinned behind the lock.
	require.Less(t, longestWait, 2*time.Second, "a session of serve's waited on the lock past OUTBOX_LOCK_TIMEOUT")
}

// throttleFor is how long provider_throttle's providers answer 429: a
// while in CI, minutes with -exhaustion.throttle.
var throttleFor = 15 * time.Second

func init() {
	if v := os.Getenv("EXHAUSTION_THROTTLE"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			throttleFor = d
		}
	}
}

// testProviderThrottle makes the webhook receiver and the ticket system
// answer every request 429 (Retry-After 1) for throttleFor while agents
// enqueue: the intents are stored (201) and wait pending as rate_limited,
// nothing is sent, no attempt is spent, and all of them are sent once each
// as soon as the throttle ends.
func testProviderThrottle(t *testing.T) {
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{CrashSafe: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	e := newClusterExhaustEnv(t, cluster)
	server := e.serve()
	e.sb.Webhooks.Throttle(throttleFor)
	e.sb.Zendesk.Throttle(throttleFor)
	throttledAt := time.Now()
	load := startExhaustLoad(server.addr, 2)
	// Tickets too, a reconcilable effect, over the Go library.
	var tickets []*outbox.Intent
	for i := range 20 {
		args := map[string]any{"subject": fmt.Sprintf("Refund %d", i), "body": "Please refund."}
		tickets = append(tickets, e.enqueue(t, fmt.Sprintf("t%03d", i), "ticket", args))
	}
	time.Sleep(throttleFor - time.Since(throttledAt) - 2*time.Second)
	var pending, rateLimited int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE error->>'code' = 'rate_limited')
		FROM outbox.outbox_intent`).Scan(&pending, &rateLimited))
	require.Zero(t, e.sb.Webhooks.Effects()+e.sb.Zendesk.Effects(), "an effect made while the provider throttled")
	requests := e.sb.Webhooks.Requests() + e.sb.Zendesk.Requests()
	notSent := metricSample(t, server.addr, `outbox_effect_attempts_total{effect="webhook",outcome="not_sent"}`) +
		metricSample(t, server.addr, `outbox_effect_attempts_total{effect="ticket",outcome="not_sent"}`)
	var maxAttempt int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT coalesce(max(attempt), 0) FROM outbox.outbox_intent`).Scan(&maxAttempt))
	time.Sleep(time.Until(throttledAt.Add(throttleFor)))
	liftedAt := time.Now()
	load.end()
	load.stop = make(chan struct{}) // settle ends it again
	for _, ti := range tickets {
		intent := e.waitIntent(t, ti.Key, 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, intent.State)
		require.Equal(t, 1, e.sb.Zendesk.EffectsFor(intent.ProviderKey), "tickets of %s", ti.Key)
	}
	f := e.settle(t, load)
	var lastDone time.Time
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT max(completed_at) FROM outbox.outbox_intent`).Scan(&lastDone))
	f.recovery = lastDone.Sub(liftedAt)
	f.intents += len(tickets)
	f.effects += len(tickets)
	f.metric = fmt.Sprintf(`outbox_effect_attempts_total{outcome="not_sent"}=%g, outbox_intents{state="pending"} (OutboxEffectFailureRatio, OutboxPendingTooOld)`, notSent)
	t.Logf("TestExhaustion/provider_throttle: 429 for %s: %d requests refused, %d intents pending (%d rate_limited), highest attempt %d; every intent ended %s after the throttle; %s",
		throttleFor, requests, pending, rateLimited, maxAttempt, f.recovery.Round(10*time.Millisecond), f)
	require.Positive(t, requests, "no request met the throttle")
	require.Positive(t, rateLimited, "no intent showed rate_limited")
	require.Positive(t, notSent, "outbox_effect_attempts_total{outcome=not_sent} did not count the refusals")
	require.Zero(t, f.bad, "5xx answers while only the provider throttled")
	require.Zero(t, f.unavailable, "503 answers while only the provider throttled")
	require.Zero(t, f.lost)
	require.Zero(t, f.duplicates)
}

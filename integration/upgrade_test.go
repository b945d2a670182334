package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// previousRelease is the commit TestRollingUpgrade upgrades from: main when
// the test was written (outbox has no release tag yet). Move it to the last
// release's tag once there is one; OUTBOX_PREVIOUS_RELEASE overrides it.
const previousRelease = "1b872db"

// buildAt returns outboxd as of commit, built in a temporary git worktree,
// removed once built. A commit's source never changes, so the binary is
// kept in the user's cache directory (outbox-test/, keyed by the full
// commit, the platform and Go's version) and the next run skips the
// checkout and the build, which cost most of the test's first minute.
func buildAt(t *testing.T, commit string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err, "TestRollingUpgrade builds the previous release from git")
	repo := strings.TrimSpace(string(root))
	full, err := exec.Command("git", "-C", repo, "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output()
	if err != nil {
		t.Fatalf("the previous release's commit %s is not in this clone (a shallow one? git fetch --unshallow): %v", commit, err)
	}
	name := fmt.Sprintf("outboxd-%s-%s-%s-%s", strings.TrimSpace(string(full)), runtime.GOOS, runtime.GOARCH, runtime.Version())
	cacheDir := ""
	if dir, err := os.UserCacheDir(); err == nil {
		cacheDir = filepath.Join(dir, "outbox-test")
		if info, err := os.Stat(filepath.Join(cacheDir, name)); err == nil && info.Mode().IsRegular() {
			t.Logf("previous release %s from the cache: %s", commit, filepath.Join(cacheDir, name))
			return filepath.Join(cacheDir, name)
		}
	}

	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	out, err := exec.Command("git", "-C", repo, "worktree", "add", "--detach", src, commit).CombinedOutput()
	require.NoError(t, err, "git worktree add: %s", out)
	defer func() {
		if out, err := exec.Command("git", "-C", repo, "worktree", "remove", "--force", src).CombinedOutput(); err != nil {
			t.Logf("git worktree remove: %v: %s", err, out)
		}
	}()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/outboxd")
	cmd.Dir = src
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	require.NoError(t, cmd.Run(), "building outboxd at %s: %s", commit, buf.String())
	if cacheDir == "" {
		return bin
	}
	if cacheDir == "" {
		return bin
	}
	// A cache that can't be written is only a slower next run.
	if err := copyInto(bin, cacheDir, name); err != nil {
		t.Logf("previous release not cached: %v", err)
		return bin
	}
	return filepath.Join(cacheDir, name)
}

// copyInto copies the executable file src to dir/name through a rename, so
// that a run beside this one never finds a binary half written.
func copyInto(src, dir, name string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; the leftover otherwise
	_, err = tmp.Write(data)
	if err := errors.Join(err, tmp.Close(), os.Chmod(tmp.Name(), 0o755)); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}

// upgradeEffects are the effects under load, one of each guarantee (and
// webhook, deduplicated by the receiver, in batches).
var upgradeEffects = []string{"charge", "ticket", "email", "webhook"}

// TestRollingUpgrade upgrades a running deployment the supported way
// (docs/operations.md, "Upgrading"): two replicas of the previous release
// serve agents enqueueing effects of every guarantee over HTTP; the
// current release's migrate up runs while they serve; two current replicas
// start beside them; the old ones stop one by one, the first with SIGTERM,
// the second with SIGKILL. Every acknowledged intent must be there and
// end, no effect may be made twice, and the longest lock a migration step
// held is printed.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	commit := previousRelease
	if v := os.Getenv("OUTBOX_PREVIOUS_RELEASE"); v != "" {
		commit = v
	}
	old := buildAt(t, commit)
	// Built now, so that migrate up's time below is its own.
	outboxd(t)

	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{CrashSafe: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	const schema = "outbox"
	pool, err := pgxpool.New(ctx, cluster.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	sb, err := sandbox.Start(&sandbox.Config{StripeAPIKey: "sk_test_integration", ZendeskEmail: "agent@example.com", ZendeskToken: "zendesk-token"})
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	vars := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + cluster.URL() + "&application_name=outboxd_serve",
		"OUTBOX_SCHEMA=" + schema,
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_ALLOW_NO_AUTH=true",
		"OUTBOX_EFFECT_TIMEOUT=1s",
		"OUTBOX_WORKERS=10",
		"OUTBOX_RECONCILE_INTERVAL=2s",
		"OUTBOX_STRIPE_URL=" + sb.Stripe.URL(),
		"OUTBOX_STRIPE_KEY=sk_test_integration",
		"OUTBOX_SMTP_ADDR=" + sb.SMTP.Addr(),
		"OUTBOX_SMTP_FROM=Shop <shop@example.com>",
		"OUTBOX_SMTP_TLS=none",
		"OUTBOX_ZENDESK_URL=" + sb.Zendesk.URL(),
		"OUTBOX_ZENDESK_EMAIL=agent@example.com",
		"OUTBOX_ZENDESK_TOKEN=zendesk-token",
		"OUTBOX_WEBHOOKS=hook=" + sb.Webhooks.EndpointURL("hook", true) + ";dedupe",
		"OUTBOX_WEBHOOK_SECRET=" + sb.Webhooks.Secret(),
	}
	e := &env{t: t, client: client, pool: pool, schema: schema, vars: vars}
	migrator := &env{t: t, client: client, pool: pool, schema: schema,
		vars: append(slices.Clone(vars), "DATABASE_URL="+cluster.URL()+"&application_name=outboxd_migrate")}

	// The previous release's schema and replicas.
	out, stderr, code := migrator.runBin(old, "migrate", "up")
	require.Zero(t, code, "previous release's migrate up: %s%s", out, stderr)
	before := migrationVersion(t, pool)
	oldReplicas := []*process{e.serveBin(old), e.serveBin(old)}
	var (
		addrMu sync.Mutex
		addrs  = []string{oldReplicas[0].addr, oldReplicas[1].addr}
	)
	setAddrs := func(ps ...*process) {
		addrMu.Lock()
		defer addrMu.Unlock()
		addrs = addrs[:0]
		for _, p := range ps {
			addrs = append(addrs, p.addr)
		}
	}
	load := startUpgradeLoad(func() string {
		addrMu.Lock()
		defer addrMu.Unlock()
		return addrs[rand.IntN(len(addrs))]
	}, 4)
	time.Sleep(3 * time.Second)

	// A migration that says it breaks the previous release is applied the
	// way its file says a release must be: with the old replicas stopped
	// first (docs/operations.md, "Upgrading").
	var breaking []string
	for _, m := range migrations.All() {
		if m.Version > before && strings.HasPrefix(m.Compatibility, migrations.CompatibilityBreakingPrefix) {
			breaking = append(breaking, fmt.Sprintf("%03d_%s: %s", m.Version, m.Name, m.Compatibility))
		}
	}
	if len(breaking) > 0 {
		t.Logf("breaking migrations %v: the previous release stops before migrate up", breaking)
		for _, p := range oldReplicas {
			p.signal(syscall.SIGTERM)
			<-p.done
		}
	}

	// The current release's migrations while the old replicas serve, with
	// every lock the migration's session holds sampled.
	sampler := startLockSampler(t, cluster.URL())
	migrateStart := time.Now()
	out, stderr, code = migrator.run("migrate", "up")
	migrateTook := time.Since(migrateStart)
	locks, serveWait := sampler.stop()
	require.Zero(t, code, "migrate up under load: %s%s", out, stderr)
	after := migrationVersion(t, pool)
	time.Sleep(2 * time.Second)

	// The current replicas beside the old ones, then the old ones go.
	newReplicas := []*process{e.serve(), e.serve()}
	killedAt := time.Now()
	if len(breaking) == 0 {
		setAddrs(oldReplicas[0], oldReplicas[1], newReplicas[0], newReplicas[1])
		time.Sleep(2 * time.Second)
		setAddrs(oldReplicas[1], newReplicas[0], newReplicas[1])
		oldReplicas[0].signal(syscall.SIGTERM)
		select {
		case <-oldReplicas[0].done:
		case <-time.After(30 * time.Second):
			t.Fatal("the previous release's serve did not stop on SIGTERM")
		}
		time.Sleep(2 * time.Second)
		setAddrs(newReplicas[0], newReplicas[1])
		oldReplicas[1].kill9()
		killedAt = time.Now()
	} else {
		setAddrs(newReplicas[0], newReplicas[1])
	}
	time.Sleep(2 * time.Second)
	load.end()

	// Every acknowledged intent is there and ends; effects per provider
	// key.
	standIns := map[string]standIn{"charge": sb.Stripe, "ticket": sb.Zendesk, "email": sb.SMTP, "webhook": sb.Webhooks}
	states := map[string]int{}
	var lost, duplicates, effects int
	var lastEnd time.Time
	for key, id := range load.acked {
		intent, err := client.Get(ctx, "", key)
		if err != nil || intent.ID != id {
			lost++
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		intent, err = client.Wait(wctx, "", key)
		cancel()
		require.NoError(t, err, "intent %s never ended", key)
		states[string(intent.State)]++
		n := standIns[intent.Effect].EffectsFor(intent.ProviderKey)
		effects += n
		if n > 1 {
			duplicates += n - 1
		}
		if intent.CompletedAt != nil && intent.CompletedAt.After(lastEnd) {
			lastEnd = *intent.CompletedAt
		}
	}
	var unaccounted int
	for _, s := range standIns {
		unaccounted += s.Effects()
	}
	unaccounted -= effects
	// The headline is the longest lock that blocks a writer (anything
	// above ACCESS SHARE: serve's inserts and updates take ROW
	// EXCLUSIVE); a migration's reads of its own tables block nobody.
	longest := "none"
	if after == before {
		longest = "none: no migration was pending"
	}
	for _, l := range locks {
		if l.mode != "AccessShareLock" {
			longest = l.String()
			break
		}
	}
	t.Logf("TestRollingUpgrade: %s (outbox migration %d) to this tree (%d) under load: intents %d, effects %d, duplicates %d, lost %d, effects of no acknowledged intent %d, states %v, "+
		"503s %d, other failed calls %d; migrate up took %s, longest lock blocking writers held by a migration step: %s (locks on the schema's relations %d), longest lock wait of a serve session during it %s; the last intent ended %s after the SIGKILL (agents enqueued for 2 s past it)",
		commit, before, after, len(load.acked), effects, duplicates, lost, unaccounted, states, load.unavailable, load.failed,
		migrateTook.Round(time.Millisecond), longest, len(locks), serveWait.Round(time.Millisecond), lastEnd.Sub(killedAt).Round(10*time.Millisecond))
	for _, l := range locks[:min(len(locks), 5)] {
		t.Logf("migration lock: %s", l)
	}
	require.Positive(t, len(load.acked), "no intent acknowledged")
	require.Zero(t, lost, "acknowledged intents lost")
	require.Zero(t, duplicates, "effects made twice")
	for state := range states {
		require.Contains(t, []string{"succeeded", "unknown"}, state, "intents ended %v", states)
	}
}

// migrationVersion is the newest outbox migration applied.
func migrationVersion(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var v int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT coalesce(max(version), 0) FROM outbox.outbox_migration`).Scan(&v))
	return v
}

// upgradeLoad is agents enqueueing effects of every guarantee over HTTP,
// each key retried (at any replica) until acknowledged.
type upgradeLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu                  sync.Mutex
	acked               map[string]int64
	unavailable, failed int
	serial              int
}

func startUpgradeLoad(addr func() string, agents int) *upgradeLoad {
	l := &upgradeLoad{stop: make(chan struct{}), acked: map[string]int64{}}
	httpc := &http.Client{Timeout: 10 * time.Second}
	for range agents {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				l.mu.Lock()
				l.serial++
				n := l.serial
				l.mu.Unlock()
				effect := upgradeEffects[n%len(upgradeEffects)]
				key := fmt.Sprintf("u%05d", n)
				args := map[string]any{}
				for k, v := range effectArgs[effect] {
					args[k] = v
				}
				switch effect {
				case "charge":
					args["amount"] = 100 + n
				case "webhook":
					args["payload"] = map[string]any{"key": key}
				default:
					args["subject"] = key
				}
				body := map[string]any{"effect": effect, "args": args}
				for {
					select {
					case <-l.stop:
						return
					default:
					}
					ans := agentCall(context.Background(), httpc, http.MethodPost, addr(), "/v1/intents", http.Header{"Idempotency-Key": {key}}, body)
					l.mu.Lock()
					switch {
					case ans.ok():
						l.acked[key] = ans.Intent.ID
					case ans.Status == http.StatusServiceUnavailable:
						l.unavailable++
					default:
						l.failed++
					}
					l.mu.Unlock()
					if ans.ok() {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				time.Sleep(30 * time.Millisecond)
			}
		}()
	}
	return l
}

func (l *upgradeLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// heldLock is a lock a migration's session held, and for how long it was
// seen held.
type heldLock struct {
	relation, mode string
	held           time.Duration
}

func (l heldLock) String() string {
	return fmt.Sprintf("%s on %s for %s", l.mode, l.relation, l.held.Round(time.Millisecond))
}

// lockSampler samples, every few milliseconds, the locks on the schema's
// tables and indexes granted to sessions named outboxd_migrate.
type lockSampler struct {
	done  chan struct{}
	ended chan []heldLock
	// serveWait is the longest a session of serve's was seen waiting
	// for a lock, read once ended is.
	serveWait time.Duration
}

func startLockSampler(t *testing.T, url string) *lockSampler {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	s := &lockSampler{done: make(chan struct{}), ended: make(chan []heldLock, 1)}
	go func() {
		defer conn.Close(context.Background())
		type lockID struct {
			pid            int
			relation, mode string
		}
		first, last := map[lockID]time.Time{}, map[lockID]time.Time{}
		for {
			select {
			case <-s.done:
				var locks []heldLock
				for id, at := range first {
					locks = append(locks, heldLock{relation: id.relation, mode: id.mode, held: last[id].Sub(at)})
				}
				slices.SortFunc(locks, func(a, b heldLock) int { return int(b.held - a.held) })
				s.ended <- locks
				return
			default:
			}
			var waitMS float64
			if conn.QueryRow(context.Background(), `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - query_start)) * 1000, 0)
				FROM pg_stat_activity WHERE application_name = 'outboxd_serve' AND wait_event_type = 'Lock'`).Scan(&waitMS) == nil {
				s.serveWait = max(s.serveWait, time.Duration(waitMS*float64(time.Millisecond)))
			}
			// The schema's own tables and indexes: the catalogues' share
			// locks block nobody.
			rows, err := conn.Query(context.Background(), `SELECT l.pid, l.relation::regclass::text, l.mode
				FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE a.application_name = 'outboxd_migrate' AND l.granted AND l.locktype = 'relation' AND n.nspname = 'outbox'`)
			if err == nil {
				now := time.Now()
				for rows.Next() {
					var id lockID
					if rows.Scan(&id.pid, &id.relation, &id.mode) == nil {
						if _, ok := first[id]; !ok {
							first[id] = now
						}
						last[id] = now
					}
				}
				rows.Close()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return s
}

// stop ends the sampling and returns the locks seen, longest held first,
// and the longest lock wait of a serve session.
func (s *lockSampler) stop() ([]heldLock, time.Duration) {
	close(s.done)
	locks := <-s.ended
	return locks, s.serveWait
}

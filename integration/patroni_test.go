package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// Two PostgreSQL nodes under Debian's Patroni, with etcd, on loopback, in
// synchronous mode: what decides failovers in most self-run clusters.
// serve and the agents reach the primary through a multi-host connection
// string (target_session_attrs=read-write). Under load, a switchover with
// patronictl (the routine event), then a kill -9 of the new primary's
// postmaster (the crash): no acknowledged intent is lost, no effect is made
// twice, and serve writes again by itself after each, in the time printed.
func TestPatroniFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	patroniBin := requireOperatorTool(t, "patroni", "patroni")
	patronictl := requireOperatorTool(t, "patronictl", "patroni")
	etcdBin := requireOperatorTool(t, "etcd", "etcd-server")
	pgBin := fullPGBinDir(t)

	c := startPatroni(t, patroniBin, etcdBin, pgBin)
	url := c.url()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	const schema = "outbox"
	m, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)

	sb, err := sandbox.Start(&sandbox.Config{})
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	e := &env{t: t, client: client, pool: pool, schema: schema, vars: []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + url,
		"OUTBOX_SCHEMA=" + schema,
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_ALLOW_NO_AUTH=true",
		"OUTBOX_EFFECT_TIMEOUT=1s",
		"OUTBOX_WORKERS=10",
		"OUTBOX_WEBHOOKS=hook=" + sb.Webhooks.EndpointURL("hook", true) + ";dedupe",
		"OUTBOX_WEBHOOK_SECRET=" + sb.Webhooks.Secret(),
	}}
	e.serve()

	// Agents enqueue steadily, each key until acknowledged (a failed
	// enqueue is retried with the same key, as an agent does).
	args := func(key string) map[string]any {
		return map[string]any{"endpoint": "hook", "payload": map[string]any{"key": key}}
	}
	var (
		mu     sync.Mutex
		acked  = map[string]bool{}
		serial int
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				serial++
				key := fmt.Sprintf("k%05d", serial)
				mu.Unlock()
				for {
					select {
					case <-stop:
						return
					default:
					}
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					_, err := client.EnqueueTx(cctx, pool, &outbox.EnqueueParams{Key: key, Effect: "webhook", Args: args(key)})
					cancel()
					if err == nil {
						mu.Lock()
						acked[key] = true
						mu.Unlock()
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	require.Eventually(t, func() bool { return ackedCount() >= 20 }, 30*time.Second, 10*time.Millisecond, "no enqueue was acknowledged")
	time.Sleep(2 * time.Second)

	// writesAgain is the time from start until an intent enqueued after the
	// fault has ended: serve's drain, River and a worker all wrote on the
	// new primary.
	probes := 0
	writesAgain := func(start time.Time) time.Duration {
		probes++
		key := fmt.Sprintf("probe-%d", probes)
		require.Eventually(t, func() bool {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := client.EnqueueTx(cctx, pool, &outbox.EnqueueParams{Key: key, Effect: "webhook", Args: args(key)})
			return err == nil
		}, 60*time.Second, 100*time.Millisecond, "no enqueue after the fault")
		waitThroughFaults(t, client, key, 90*time.Second)
		return time.Since(start)
	}

	// The routine event: a switchover to the synchronous standby.
	underWaySwitchover := underWay(ctx, pool, schema)
	start := time.Now()
	out, err := exec.Command(patronictl, "-c", c.config(0), "switchover", "--leader", "n1", "--candidate", "n2", "--force").CombinedOutput()
	require.NoError(t, err, "%s", out)
	afterSwitchover := writesAgain(start)
	c.waitSync(t, 1)
	time.Sleep(2 * time.Second)

	// The crash: the new primary's postmaster killed.
	underWayKill := underWay(ctx, pool, schema)
	pidText, err := os.ReadFile(filepath.Join(c.dataDir(1), "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(pidText), "\n", 2)[0])
	require.NoError(t, err)
	start = time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	afterKill := writesAgain(start)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	// Every acknowledged intent is there and ends; one effect per agent key.
	lost := 0
	for key := range acked {
		if _, err := client.Get(ctx, "", key); err != nil {
			require.ErrorIs(t, err, outbox.ErrNotFound)
			lost++
			continue
		}
		waitThroughFaults(t, client, key, 60*time.Second)
	}
	perKey := map[string]map[string]bool{}
	effects := 0
	for _, d := range sb.Webhooks.Deliveries() {
		effects++
		var body struct {
			Key string `json:"key"`
		}
		require.NoError(t, json.Unmarshal(d.Body, &body))
		if perKey[body.Key] == nil {
			perKey[body.Key] = map[string]bool{}
		}
		perKey[body.Key][d.ID] = true
	}
	duplicates := 0
	for _, ids := range perKey {
		if len(ids) > 1 {
			duplicates++
		}
	}
	var intents int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox.outbox_intent`).Scan(&intents))
	t.Logf("TestPatroniFailover: Patroni synchronous mode, faults 2 (switchover with %d intents under way, kill -9 of the primary's postmaster with %d), "+
		"intents %d (%d acknowledged under load), effects %d, duplicates %d, lost %d; serve wrote again %s after the switchover, %s after the kill",
		underWaySwitchover, underWayKill, intents, len(acked), effects, duplicates, lost,
		afterSwitchover.Round(10*time.Millisecond), afterKill.Round(10*time.Millisecond))
	require.Zero(t, lost, "acknowledged intents lost")
	require.Zero(t, duplicates, "effects made twice")
	require.Equal(t, intents, effects, "one effect per intent")
}

// waitThroughFaults waits until the intent is terminal, reading it every
// 100 ms: a read that fails (Patroni is still restarting or switching the
// primary) is tried again, where Wait would return its error.
func waitThroughFaults(t *testing.T, client *outbox.Client, key string, timeout time.Duration) {
	t.Helper()
	var last error
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		intent, err := client.Get(ctx, "", key)
		cancel()
		if err == nil && intent.State.Terminal() {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("intent %s did not end within %s (last error: %v)", key, timeout, last)
}

// underWay counts the intents pending or running, -1 when the database
// does not answer within a second.
func underWay(ctx context.Context, pool *pgxpool.Pool, schema string) int {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n := -1
	_ = pool.QueryRow(qctx, fmt.Sprintf(`SELECT count(*) FROM %s.outbox_intent WHERE state IN ('pending', 'running')`, schema)).Scan(&n)
	return n
}

// patroniCluster is etcd and two PostgreSQL nodes under Patroni (n1, n2).
type patroniCluster struct {
	dir      string
	pgPorts  [2]int
	apiPorts [2]int
}

func (c *patroniCluster) config(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("n%d.yml", i+1))
}
func (c *patroniCluster) dataDir(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("n%d", i+1))
}

// url reaches whichever node is the primary.
func (c *patroniCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		c.pgPorts[0], c.pgPorts[1])
}

// waitSync waits until node i streams to the primary as its synchronous
// standby.
func (c *patroniCluster) waitSync(t *testing.T, primary int) {
	t.Helper()
	node := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", c.pgPorts[primary])
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		p, err := pgxpool.New(ctx, node)
		if err != nil {
			return false
		}
		defer p.Close()
		var state string
		_ = p.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication`).Scan(&state)
		return state == "sync"
	}, 90*time.Second, 200*time.Millisecond, "no synchronous standby streams to n%d", primary+1)
}

// startPatroni starts etcd and n1 (which bootstraps the cluster and leads),
// then n2 (a replica made by pg_basebackup), and waits until n2 is n1's
// synchronous standby. Everything runs as the postgres user when the test
// runs as root, and is stopped at the end of the test.
func startPatroni(t *testing.T, patroniBin, etcdBin, pgBin string) *patroniCluster {
	t.Helper()
	dir := operatorDir(t, "patroni-")
	ports := freePorts(t, 6)
	c := &patroniCluster{dir: dir, pgPorts: [2]int{ports[2], ports[3]}, apiPorts: [2]int{ports[4], ports[5]}}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	startTool(t, dir, "etcd", 5*time.Second, etcdBin, "--name", "e1", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "e1="+peerURL)
	require.Eventually(t, func() bool { return httpOK(etcdURL + "/health") }, 30*time.Second, 100*time.Millisecond, "etcd did not start")

	// Run after the Patroni processes are stopped: a PostgreSQL that
	// outlived its Patroni (killed after its grace) is stopped too.
	t.Cleanup(func() {
		for i := range 2 {
			b, err := os.ReadFile(filepath.Join(c.dataDir(i), "postmaster.pid"))
			if err != nil {
				continue
			}
			if pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGQUIT)
			}
		}
	})
	for i := range 2 {
		// ttl, loop_wait and retry_timeout at Patroni's smallest (ttl 20
		// s at least): a node checks every second, a leader that stopped
		// renewing is replaced after ttl.
		yml := fmt.Sprintf(`scope: outboxtest
name: n%[1]d
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd3:
  hosts: 127.0.0.1:%[3]d
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 200
        wal_keep_size: 128MB
  initdb:
  - encoding: UTF8
  - auth: trust
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:%[4]d
  connect_address: 127.0.0.1:%[4]d
  data_dir: %[5]s
  bin_dir: %[6]s
  pgpass: %[7]s/pgpass%[1]d
  basebackup:
  - checkpoint: fast
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
  parameters:
    unix_socket_directories: %[7]s
`, i+1, c.apiPorts[i], ports[0], c.pgPorts[i], c.dataDir(i), pgBin, dir)
		writeOwned(t, c.config(i), yml, 0o600)
		// Patroni stops its PostgreSQL on SIGTERM, in its own time.
		startTool(t, dir, fmt.Sprintf("patroni-n%d", i+1), 20*time.Second, patroniBin, c.config(i))
		if i == 0 {
			require.Eventually(t, func() bool { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/primary", c.apiPorts[0])) },
				90*time.Second, 200*time.Millisecond, "n1 did not become the primary")
		}
	}
	c.waitSync(t, 0)
	return c
}

// httpOK reports whether a GET of url answers 200.
func httpOK(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = res.Body.Close()
	return res.StatusCode == http.StatusOK
}

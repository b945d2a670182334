package integration

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox/noop"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

// SIGTERM while an attempt is at the provider: serve stops fetching, lets
// the attempt finish within OUTBOX_EFFECT_TIMEOUT, records its outcome, and
// exits 0. Nothing is left for another process.
func TestSIGTERMLetsTheAttemptInFlightFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "OUTBOX_EFFECT_TIMEOUT=5s")
	srv := e.serve()
	// At most once, so that only this attempt can ever act: the effect is
	// recorded, then the attempt lasts two more seconds.
	res, err := e.client.EnqueueTx(context.Background(), e.pool, &outbox.EnqueueParams{
		Key: "in-flight", Effect: "noop_at_most_once", Args: map[string]any{"_noop": map[string]any{"sleep": "2s"}},
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := noop.Count(context.Background(), e.pool, e.schema, res.Intent.ProviderKey)
		return err == nil && n == 1
	}, 30*time.Second, 10*time.Millisecond, "the attempt never reached the provider")
	stopped := time.Now()
	srv.signal(syscall.SIGTERM)
	select {
	case <-srv.done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.Equal(t, 0, srv.cmd.ProcessState.ExitCode(), srv.output())
	intent, err := e.client.Get(context.Background(), "", "in-flight")
	require.NoError(t, err)
	require.Equal(t, outbox.StateSucceeded, intent.State, "the attempt's outcome was recorded before exit")
	t.Logf("stopped %s after SIGTERM, the attempt in flight recorded as %s", time.Since(stopped).Round(100*time.Millisecond), intent.State)
}

// Several replicas starting together run `outboxd migrate up` at once: each
// succeeds, and each migration is applied once.
func TestConcurrentMigrateUp(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	e := &env{t: t, pool: testdb.Pool(t), schema: schema, vars: baseVars(t, schema)}

	const replicas = 4
	var wg sync.WaitGroup
	codes := make([]int, replicas)
	outs := make([]string, replicas)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(outboxd(t), "migrate", "up")
			cmd.Env = e.vars
			out, err := cmd.CombinedOutput()
			outs[i] = string(out)
			if err != nil {
				codes[i] = cmd.ProcessState.ExitCode()
			}
		}()
	}
	wg.Wait()
	for i := range replicas {
		require.Zero(t, codes[i], "replica %d: %s", i, outs[i])
	}
	var applied, distinct int
	require.NoError(t, e.pool.QueryRow(context.Background(),
		fmt.Sprintf(`SELECT count(*), count(DISTINCT version) FROM %s`, e.table("outbox_migration"))).Scan(&applied, &distinct))
	require.Equal(t, distinct, applied, "a migration applied twice")
	stdout, _, code := e.run("migrate", "status")
	require.Zero(t, code)
	require.Contains(t, stdout, "up to date")
}

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
)

// An operator opens River UI in a real browser (headless Chromium, driven by
// puppeteer-core), behind basic auth, and the job's page says what the job
// was for and what it did: the intent's namespace and effect, and its
// attempt's output (state, intent id), never the key or the arguments.
func TestRiverUIInABrowser(t *testing.T) {
	t.Parallel()
	chromium, node := browserTools(t)

	e := newEnv(t, "OUTBOX_UI_USER=operator", "OUTBOX_UI_PASSWORD=correct-horse-battery")
	srv := e.serve()
	_, err := e.client.EnqueueTx(context.Background(), e.pool, &outbox.EnqueueParams{
		Namespace: "billing", Key: "browser-secret-key", Effect: "noop", Args: map[string]any{"email": "ann@example.com"},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	intent, err := e.client.Wait(ctx, "billing", "browser-secret-key")
	require.NoError(t, err)
	require.Equal(t, outbox.StateSucceeded, intent.State)
	require.Eventually(t, func() bool {
		return scalar(t, e, `SELECT count(*) FROM `+e.table("river_job")+` WHERE state = 'completed' AND id = `+jsonInt(*intent.JobID)) == 1
	}, 10*time.Second, 20*time.Millisecond)

	// A browser of its own, with the console check's budget: Chromium on a
	// 2-core machine the rest of the suite keeps busy took more than the
	// 30 s left of the wait's.
	runCtx, cancelRun := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelRun()
	cmd := exec.CommandContext(runCtx, node, "riverui_check.mjs")
	cmd.Dir = "browser"
	cmd.Env = append(os.Environ(),
		"CHROME_PATH="+chromium,
		"RIVERUI_URL=http://"+srv.addr+"/riverui",
		"RIVERUI_USER=operator",
		"RIVERUI_PASSWORD=correct-horse-battery",
		"JOB_ID="+jsonInt(*intent.JobID),
		"WAIT_FOR=succeeded",
		"SCREENSHOT="+os.Getenv("RIVERUI_SCREENSHOT"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "riverui_check: %s", stderr.String())
	var page struct {
		Unauthenticated int    `json:"unauthenticated"`
		Status          int    `json:"status"`
		Text            string `json:"text"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &page), stdout.String())
	require.Equal(t, 401, page.Unauthenticated, "River UI without credentials")
	require.Equal(t, 200, page.Status)
	for _, want := range []string{"outbox_intent", "billing", "noop", "intent_id", "succeeded", jsonInt(intent.ID)} {
		require.Contains(t, page.Text, want)
	}
	require.NotContains(t, page.Text, "browser-secret-key")
	require.NotContains(t, page.Text, "ann@example.com")
}

// browserTools finds Chromium and node with the check's packages installed
// (.ci/run installs them); without them the test says what is missing and
// skips, or fails under CI.
func browserTools(t *testing.T) (chromium, node string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing; .ci/run installs it", what)
		}
		t.Skipf("%s is missing: apt-get install chromium; cd integration/browser && npm ci", what)
	}
	chromium = os.Getenv("CHROME_PATH")
	if chromium == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				chromium = p
				break
			}
		}
	}
	if chromium == "" {
		missing("Chromium")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node")
	}
	if _, err := os.Stat(filepath.Join("browser", "node_modules", "puppeteer-core")); err != nil {
		missing("puppeteer-core (integration/browser/node_modules)")
	}
	return chromium, node
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

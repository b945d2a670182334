package integration

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox/mcpupstream"
)

// The examples of examples/, each run as its README says against a real
// outboxd serve whose providers are the sandbox's stand-ins in this process:
// no API key, no network. Each prints its outcome as a JSON line; the tests
// check it, and count what the stand-in Stripe did.

// exampleOutcome is an example's last JSON line.
type exampleOutcome struct {
	Example    string          `json:"example"`
	IntentIDs  []int64         `json:"intent_ids"`
	Duplicates []bool          `json:"duplicates"`
	State      string          `json:"state"`
	Result     json.RawMessage `json:"result"`
	// Approval is the Python example's second part: an action that waits
	// for a person.
	Approval struct {
		IntentIDs  []int64  `json:"intent_ids"`
		States     []string `json:"states"`
		ApprovedBy *string  `json:"approved_by"`
	} `json:"approval"`
}

// runExample runs the command in dir with OUTBOX_URL pointing at srv, and
// returns the outcome it printed.
func runExample(t *testing.T, srv *process, dir string, name string, args ...string) *exampleOutcome {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = filepath.Join("..", "examples", dir)
	cmd.Env = append(os.Environ(), "OUTBOX_URL=http://"+srv.addr, "EXAMPLE_RUN="+strings.ReplaceAll(t.Name(), "/", "-"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "%s %v\nstdout: %s\nstderr: %s", name, args, stdout.String(), stderr.String())
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("%s %v did not finish\nstdout: %s\nstderr: %s", name, args, stdout.String(), stderr.String())
	}
	var last string
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "{") {
			last = line
		}
	}
	require.NotEmpty(t, last, "no outcome printed\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	var out exampleOutcome
	require.NoError(t, json.Unmarshal([]byte(last), &out), last)
	return &out
}

// exampleTools says whether node (with the examples' packages) and python3
// are here; without them the tests say so and skip, or fail under CI.
func requireTool(t *testing.T, name, hint string, paths ...string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing; .ci/run installs it", what)
		}
		t.Skipf("%s is missing: %s", what, hint)
	}
	if _, err := exec.LookPath(name); err != nil {
		missing(name)
	}
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join("..", "examples", p)); err != nil {
			missing(p)
		}
	}
}

func TestExamplesTypeScript(t *testing.T) {
	t.Parallel()
	requireTool(t, "node", "cd examples/typescript && npm ci", "typescript/node_modules/tsx")
	p := newProviderEnv(t, false)
	srv := p.serve()

	// Each example charges once, whatever its agent repeats.
	for _, example := range []string{"fetch", "ai-sdk", "langchain", "openai-agents"} {
		t.Run(example, func(t *testing.T) {
			before := p.sb.Stripe.Effects()
			out := runExample(t, srv, "typescript", "npx", "tsx", example+".ts")
			require.Equal(t, example, out.Example)
			require.GreaterOrEqual(t, len(out.IntentIDs), 2, "the agent repeated the call")
			for _, id := range out.IntentIDs {
				require.Equal(t, out.IntentIDs[0], id, "every answer names the one intent")
			}
			require.Equal(t, "succeeded", out.State)
			require.Equal(t, before+1, p.sb.Stripe.Effects(), "one charge at Stripe")
		})
	}

	// Under a rule that holds every charge for a person, the fetch example
	// reports the intent awaiting approval at once, rather than waiting on
	// it, and nothing is charged.
	t.Run("fetch/AwaitingApproval", func(t *testing.T) {
		held := newProviderEnv(t, false, "OUTBOX_APPROVAL=charge")
		srv := held.serve()
		start := time.Now()
		out := runExample(t, srv, "typescript", "npx", "tsx", "fetch.ts")
		// Not a measure of speed: a wait on the intent would hold the
		// example for its whole 30 s, which is what this rules out.
		require.Less(t, time.Since(start), 25*time.Second, "the example waited on an intent that waits for a person")
		require.Equal(t, "fetch", out.Example)
		require.Len(t, out.IntentIDs, 3)
		for _, id := range out.IntentIDs {
			require.Equal(t, out.IntentIDs[0], id, "every answer names the one intent")
		}
		require.Equal(t, []bool{false, true, true}, out.Duplicates)
		require.Equal(t, "awaiting_approval", out.State)
		require.Zero(t, held.sb.Stripe.Effects(), "nothing charged before a person approves")
	})
}

// newExamplesDeclaredEnv serves examples/effects.yaml's declared
// support_ticket against the sandbox's Zendesk stand-in.
func newExamplesDeclaredEnv(t *testing.T) (*providerEnv, *process) {
	t.Helper()
	file, err := filepath.Abs(filepath.Join("..", "examples", "effects.yaml"))
	require.NoError(t, err)
	p := newProviderEnv(t, false, "OUTBOX_EFFECTS_FILE="+file)
	srv := p.serve("ZENDESK_URL="+p.sb.Zendesk.URL(), "ZENDESK_AUTH="+base64.StdEncoding.EncodeToString([]byte("agent@example.com/token:zendesk-token")))
	return p, srv
}

// checkDeclaredOutcome: two calls, one intent, one ticket at the stand-in.
func checkDeclaredOutcome(t *testing.T, p *providerEnv, out *exampleOutcome) {
	t.Helper()
	require.Len(t, out.IntentIDs, 2)
	require.Equal(t, out.IntentIDs[0], out.IntentIDs[1], "the retry named the first intent")
	require.Equal(t, []bool{false, true}, out.Duplicates)
	require.Equal(t, "succeeded", out.State)
	require.JSONEq(t, `{"id": 1}`, string(out.Result), "the ticket's id, kept through the declaration's result")
	require.Equal(t, 1, p.sb.Zendesk.Effects(), "one ticket")
}

// TestExampleTypeScriptUpstream runs the AI SDK example against an MCP
// server behind outbox (the test upstream over stdio): a framework's retry
// of the step makes one note, and both calls get the stored answer.
func TestExampleTypeScriptUpstream(t *testing.T) {
	t.Parallel()
	requireTool(t, "node", "cd examples/typescript && npm ci", "typescript/node_modules/tsx")
	state := t.TempDir()
	file := filepath.Join(t.TempDir(), "effects.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, upstreamsFile, mcpupstreamBin(t)), 0o600))
	e := newEnv(t, "OUTBOX_EFFECTS_FILE="+file, "NOTES_STATE="+state, "OUTBOX_EFFECT_TIMEOUT=5s")
	_, stderr, code := e.run("effects", "pin", file)
	require.Equal(t, 0, code, stderr)
	srv := e.serve()
	out := runExample(t, srv, "typescript", "npx", "tsx", "ai-sdk-upstream.ts")
	require.Equal(t, "ai-sdk-upstream", out.Example)
	require.Len(t, out.IntentIDs, 2, "the framework ran the step twice")
	require.Equal(t, out.IntentIDs[0], out.IntentIDs[1], "one intent")
	require.Equal(t, []bool{false, true}, out.Duplicates)
	require.Equal(t, "succeeded", out.State, "both calls got the same stored answer")
	notes, err := mcpupstream.Notes(state)
	require.NoError(t, err)
	require.Len(t, notes, 1, "one note at the upstream")
}

func TestExamplesDeclaredEffect(t *testing.T) {
	t.Parallel()
	t.Run("TypeScript", func(t *testing.T) {
		t.Parallel()
		requireTool(t, "node", "cd examples/typescript && npm ci", "typescript/node_modules/tsx")
		p, srv := newExamplesDeclaredEnv(t)
		out := runExample(t, srv, "typescript", "npx", "tsx", "declared.ts")
		require.Equal(t, "declared", out.Example)
		checkDeclaredOutcome(t, p, out)
	})
	t.Run("Python", func(t *testing.T) {
		t.Parallel()
		requireTool(t, "python3", "install Python 3 with requests", "python/declared_effect.py")
		if err := exec.Command("python3", "-c", "import requests").Run(); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal("python3 has no requests module")
			}
			t.Skip("python3 has no requests module")
		}
		p, srv := newExamplesDeclaredEnv(t)
		out := runExample(t, srv, "python", "python3", "declared_effect.py")
		require.Equal(t, "python-declared", out.Example)
		checkDeclaredOutcome(t, p, out)
	})
}

func TestExamplePython(t *testing.T) {
	t.Parallel()
	requireTool(t, "python3", "install Python 3 with requests", "python/idempotent_tool.py")
	if err := exec.Command("python3", "-c", "import requests").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 has no requests module")
		}
		t.Skip("python3 has no requests module")
	}
	p := newProviderEnv(t, false)
	srv := p.serve()
	out := runExample(t, srv, "python", "python3", "idempotent_tool.py")
	require.Equal(t, "python", out.Example)
	require.Len(t, out.IntentIDs, 2)
	require.Equal(t, out.IntentIDs[0], out.IntentIDs[1], "the retry named the first intent")
	require.Equal(t, []bool{false, true}, out.Duplicates)
	require.Equal(t, "succeeded", out.State)
	// The charge that needed a person: both calls answered at once with
	// the one intent awaiting approval, which ran once approved.
	require.Len(t, out.Approval.IntentIDs, 2)
	require.Equal(t, out.Approval.IntentIDs[0], out.Approval.IntentIDs[1])
	require.NotEqual(t, out.IntentIDs[0], out.Approval.IntentIDs[0])
	require.Equal(t, []string{"awaiting_approval", "awaiting_approval", "succeeded"}, out.Approval.States)
	require.NotNil(t, out.Approval.ApprovedBy)
	require.Equal(t, 2, p.sb.Stripe.Effects(), "one charge at Stripe for each order")
}

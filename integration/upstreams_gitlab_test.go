package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/integration/internal/gitlabapi"
	"github.com/outbox-dev/outbox/outbox"
)

// gitlabUpstreamFile puts GitLab's MCP server from npm behind outbox. It
// has no tool that reads issues, so create_issue stays at most once.
const gitlabUpstreamFile = `upstreams:
  gitlab:
    command: [%s, %s]
    env:
      GITLAB_API_URL: "{env.GITLAB_API_URL}"
      GITLAB_PERSONAL_ACCESS_TOKEN: "{env.GITLAB_TOKEN}"
    wait: 10s
    timeout: 4s
    include: [create_issue, search_repositories, get_file_contents]
    tools:
      search_repositories: {passthrough: true}
      get_file_contents: {passthrough: true}
      create_issue:
        outcome:
          - when: error != null && error.code == -32603 && error.message.contains("422")
            class: permanent
            code: gitlab_refused
`

// inspector runs the MCP Inspector CLI against url with args and returns
// its JSON answer.
func inspector(t *testing.T, url string, args ...string) map[string]any {
	t.Helper()
	argv := append(gitlabapi.InspectorArgv(t), url)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	out, err := cmd.Output()
	var stderr string
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "inspector %v: %s", args, stderr)
	var v map[string]any
	require.NoError(t, json.Unmarshal(out, &v), string(out))
	return v
}

// TestUpstreamGitLab puts a real third-party MCP server from npm (GitLab's,
// over stdio) behind serve, against a loopback stand-in of GitLab's API,
// and calls it with a real client (the MCP Inspector CLI) and the Go SDK:
// a retried and a re-emitted create_issue make one issue each; a kill -9
// of serve after GitLab made the issue, before the answer, ends unknown
// with one issue, never two.
func TestUpstreamGitLab(t *testing.T) {
	t.Parallel()
	argv := gitlabapi.ServerArgv(t) // skips without the npm packages, outside CI
	api, err := gitlabapi.Start(nil)
	require.NoError(t, err)
	t.Cleanup(api.Close)

	file := filepath.Join(t.TempDir(), "effects.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, gitlabUpstreamFile, argv[0], argv[1]), 0o600))
	u := newEnv(t, "OUTBOX_EFFECTS_FILE="+file, "GITLAB_API_URL="+api.APIURL(), "GITLAB_TOKEN="+api.Token(), "OUTBOX_EFFECT_TIMEOUT=5s")
	stdout, stderr, code := u.run("effects", "pin", file)
	require.Equal(t, 0, code, "pin: %s%s", stdout, stderr)
	require.Regexp(t, `gitlab\s+create_issue\s+gitlab_create_issue\s+recorded\s+at_most_once`, stdout)
	require.Regexp(t, `gitlab\s+search_repositories\s+gitlab_search_repositories\s+passthrough`, stdout)
	p := u.serve()
	mcpURL := "http://" + p.addr + "/mcp"

	t.Run("InspectorListsMirroredTools", func(t *testing.T) {
		listed := inspector(t, mcpURL, "--method", "tools/list")
		tools := map[string]string{}
		for _, tool := range listed["tools"].([]any) {
			m := tool.(map[string]any)
			schema, _ := json.Marshal(m["inputSchema"])
			tools[m["name"].(string)] = string(schema)
		}
		require.Contains(t, tools["gitlab_create_issue"], `"idempotency_key"`, "recorded: outbox's arguments added")
		require.Contains(t, tools["gitlab_create_issue"], `"project_id"`, "the upstream's schema kept")
		require.NotContains(t, tools["gitlab_search_repositories"], "idempotency_key", "pass-through: unchanged")
		require.Contains(t, tools["gitlab_search_repositories"], `"search"`)
	})

	t.Run("InspectorCallsTwiceOneIssue", func(t *testing.T) {
		before := api.Count()
		call := func() map[string]any {
			return inspector(t, mcpURL, "--method", "tools/call", "--tool-name", "gitlab_create_issue",
				"--tool-arg", "project_id=outbox/demo", "title=Printer on fire", "description=third floor", "idempotency_key=gl-1")
		}
		first, second := call(), call()
		require.Equal(t, before+1, api.Count(), "one issue")
		sc1, _ := json.Marshal(first["structuredContent"].(map[string]any)["upstream"])
		sc2, _ := json.Marshal(second["structuredContent"].(map[string]any)["upstream"])
		require.JSONEq(t, string(sc1), string(sc2), "the second call got the first one's stored answer")
		require.Equal(t, true, second["structuredContent"].(map[string]any)["duplicate"])
	})

	s := mcpClient(t, p)
	t.Run("ReEmittedWithoutKeyOneIssue", func(t *testing.T) {
		before := api.Count()
		args := map[string]any{"project_id": "outbox/demo", "title": "Re-emitted", "description": "same call twice"}
		_, a1 := callTool(t, s, "gitlab_create_issue", args)
		_, a2 := callTool(t, s, "gitlab_create_issue", args)
		require.Equal(t, outbox.StateSucceeded, a1.State)
		require.Equal(t, "auto", string(a2.KeySource))
		require.True(t, a2.Duplicate)
		require.Equal(t, before+1, api.Count())
	})

	t.Run("PassThroughReads", func(t *testing.T) {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "gitlab_search_repositories", Arguments: map[string]any{"search": "demo"}})
		require.NoError(t, err)
		require.False(t, res.IsError, "%v", res.Content)
		require.Contains(t, res.Content[0].(*mcp.TextContent).Text, "outbox/demo")
	})

	t.Run("KillServeAfterGitLabActed", func(t *testing.T) {
		before := api.Count()
		api.SetFault(gitlabapi.Fault{Mode: gitlabapi.FaultSlow, Delay: time.Minute})
		go func() {
			_, _ = s.CallTool(context.Background(), &mcp.CallToolParams{Name: "gitlab_create_issue",
				Arguments: map[string]any{"project_id": "outbox/demo", "title": "Mid-call", "description": "x", "idempotency_key": "gl-kill"}})
		}()
		require.Eventually(t, func() bool { return api.Count() == before+1 }, 30*time.Second, 20*time.Millisecond,
			"GitLab made the issue: the call is under way")
		p.kill9()
		u.serve()
		got := u.wait("gl-kill", 60*time.Second)
		require.Equal(t, outbox.StateUnknown, got.State, "no tool can find the issue: an operator decides")
		require.Equal(t, before+1, api.Count(), "one issue, never sent again")
		t.Logf("TestUpstreamGitLab: kill -9 after GitLab acted: intent %s (%s), issues made %d", got.State, got.Error.Code, api.Count()-before)
	})
	fmt.Printf("TestUpstreamGitLab: issues=%d at the stand-in, duplicates=0\n", api.Count())
}

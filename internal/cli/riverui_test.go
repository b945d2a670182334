package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// uiGet requests path of serve's River UI, with basic credentials when user
// is set, and returns the answer with its body read.
func uiGet(t *testing.T, method, url, user, password string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	require.NoError(t, err)
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

func TestRiverUI(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	const user, password = "operator", "correct horse battery staple"
	srv := testrun.Serve(t, with(bundle.env, "OUTBOX_UI_USER", user, "OUTBOX_UI_PASSWORD", password))
	base := "http://" + srv.Addr + "/riverui"

	res := bundle.run(t, "enqueue", "--key", "ui-1", "--effect", "noop", "--args", `{"customer": "Ada Lovelace"}`)
	require.Equal(t, 0, res.code, res.stderr)
	res = bundle.run(t, "intents", "show", "ui-1", "--wait", "20s")
	require.Equal(t, 0, res.code, res.stderr)
	intent := decode[outbox.Intent](t, res.stdout)
	require.Equal(t, outbox.StateSucceeded, intent.State)

	t.Run("NoCredentials", func(t *testing.T) {
		for _, path := range []string{"/", "/api/jobs?state=completed", "/jobs"} {
			resp, _ := uiGet(t, http.MethodGet, base+path, "", "", nil)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
			require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic realm=")
		}
	})

	t.Run("WrongCredentials", func(t *testing.T) {
		for _, c := range [][2]string{{user, "wrong"}, {"someone", password}, {user, ""}, {user, password + "x"}} {
			resp, _ := uiGet(t, http.MethodGet, base+"/", c[0], c[1], nil)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, c)
		}
	})

	t.Run("HTML", func(t *testing.T) {
		resp, body := uiGet(t, http.MethodGet, base+"/", user, password, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
		require.Contains(t, body, "<title>River</title>")
		// The page's assets are under the prefix.
		require.Contains(t, body, `/riverui/assets/`)

		// /riverui redirects to /riverui/.
		resp, _ = uiGet(t, http.MethodGet, "http://"+srv.Addr+"/riverui", user, password, nil)
		require.GreaterOrEqual(t, resp.StatusCode, 300)
		require.Less(t, resp.StatusCode, 400)
		require.Equal(t, "/riverui/", resp.Header.Get("Location"))
	})

	t.Run("API", func(t *testing.T) {
		type jobList struct {
			Data []struct {
				Args  json.RawMessage `json:"args"`
				Kind  string          `json:"kind"`
				Queue string          `json:"queue"`
				State string          `json:"state"`
			} `json:"data"`
		}
		var (
			jobs jobList
			body string
		)
		// River completes the job shortly after the intent's outcome is
		// recorded (its completer batches).
		require.Eventually(t, func() bool {
			var resp *http.Response
			resp, body = uiGet(t, http.MethodGet, base+"/api/jobs?state=completed&kinds=outbox_intent", user, password, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Contains(t, resp.Header.Get("Content-Type"), "application/json")
			jobs = jobList{}
			require.NoError(t, json.Unmarshal([]byte(body), &jobs))
			return len(jobs.Data) > 0
		}, 10*time.Second, 50*time.Millisecond)
		require.Len(t, jobs.Data, 1, body)
		job := jobs.Data[0]
		require.Equal(t, "outbox_intent", job.Kind)
		require.Equal(t, "noop", job.Queue)
		require.Equal(t, "completed", job.State)
		// The job carries the intent's id only: the UI shows no argument.
		args := string(job.Args)
		var quoted string // River UI sends the args as a JSON string
		if json.Unmarshal(job.Args, &quoted) == nil {
			args = quoted
		}
		require.JSONEq(t, `{"intent_id": `+jsonInt(intent.ID)+`}`, args)
		require.NotContains(t, body, "Ada Lovelace")
	})

	t.Run("CrossOrigin", func(t *testing.T) {
		// A page of another origin cannot make the browser retry or cancel
		// jobs with its cached credentials.
		resp, _ := uiGet(t, http.MethodPost, base+"/api/jobs/cancel", user, password, map[string]string{"Sec-Fetch-Site": "cross-site"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		resp, _ = uiGet(t, http.MethodPost, base+"/api/jobs/cancel", user, password, map[string]string{"Origin": "https://evil.example"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	})

	t.Run("Audit", func(t *testing.T) {
		// A change is logged with the user who asked (River UI refuses
		// this empty one, which does not matter: it was asked).
		resp, _ := uiGet(t, http.MethodPost, base+"/api/jobs/cancel", user, password, nil)
		require.Less(t, resp.StatusCode, 500)
		// Every refused request above was counted.
		status, body := httpGet(t, "http://"+srv.Addr+"/metrics")
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, "\noutbox_http_auth_failures_total 7\n")
	})

	require.Equal(t, 0, srv.Stop())
	require.NotContains(t, srv.Logs(), password)
	require.Contains(t, srv.Logs(), `"msg":"River UI change","method":"POST","path":"/riverui/api/jobs/cancel","user":"operator"`)
	require.NotContains(t, srv.Logs(), `"msg":"River UI change","method":"GET"`)
}

func TestRiverUILoopbackOnly(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	srv := testrun.Serve(t, bundle.env)
	base := "http://" + srv.Addr + "/riverui"

	// Without credentials: loopback only, and only with a loopback Host (a
	// page whose DNS name was rebound to 127.0.0.1 has its own name as Host).
	resp, body := uiGet(t, http.MethodGet, base+"/", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "<title>River</title>")
	resp, body = uiGet(t, http.MethodGet, base+"/api/queues", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, _ = uiGet(t, http.MethodGet, base+"/", "", "", map[string]string{"Host": "rebound.example:8080"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, 0, srv.Stop())
}

func TestServeRefusesRiverUI(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	for name, tt := range map[string]struct {
		env  []string
		line string
	}{
		"NotLoopbackWithoutCredentials": {
			env:  []string{"OUTBOX_HTTP_ADDR", "0.0.0.0:0", "OUTBOX_API_TOKENS", "secret-token-01234567:default"},
			line: `outboxd: OUTBOX_HTTP_ADDR: "0.0.0.0:0" is not a loopback address, and OUTBOX_UI_USER and OUTBOX_UI_PASSWORD are empty`,
		},
		"UserWithoutPassword": {
			env:  []string{"OUTBOX_UI_USER", "operator"},
			line: "outboxd: OUTBOX_UI_PASSWORD: not set; expected a password of at least 16 characters, required when OUTBOX_UI_USER is set",
		},
		"ShortPassword": {
			env:  []string{"OUTBOX_UI_USER", "ops", "OUTBOX_UI_PASSWORD", "abc"},
			line: "outboxd: OUTBOX_UI_PASSWORD: is shorter than 16 characters, the API tokens' minimum: the River UI user is an operator",
		},
		"PasswordWithoutUser": {
			env:  []string{"OUTBOX_UI_PASSWORD", "hunter2"},
			line: "outboxd: OUTBOX_UI_USER: not set; expected a user name, required when OUTBOX_UI_PASSWORD is set",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := runEnv(t, with(bundle.env, tt.env...), nil, "serve")
			require.Equal(t, 1, res.code, res.stderr)
			require.Equal(t, 1, strings.Count(res.stderr, "\n"), "one line: %s", res.stderr)
			require.Contains(t, res.stderr, tt.line)
			require.NotContains(t, res.stderr, "hunter2")
		})
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

package cli_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/internal/testrun"
	"github.com/outbox-dev/outbox/outbox"
)

// TestServeLogsRedacted runs emails that succeed, are refused, and lose their
// outcome through a real serve logging at debug level, and finds none of
// their addresses, subjects or bodies in the logs.
func TestServeLogsRedacted(t *testing.T) {
	t.Parallel()

	sink, err := sandbox.NewSMTPSink(nil)
	require.NoError(t, err)
	t.Cleanup(sink.Close)
	_, schema := testdb.MigratedSchema(t)
	srv := testrun.Serve(t, map[string]string{
		"DATABASE_URL":      testdb.URL(t),
		"OUTBOX_SCHEMA":     schema,
		"OUTBOX_SMTP_ADDR":  sink.Addr(),
		"OUTBOX_SMTP_FROM":  "Shop <shop@example.com>",
		"OUTBOX_SMTP_TLS":   "none",
		"OUTBOX_LOG_LEVEL":  "debug",
		"OUTBOX_LOG_FORMAT": "json",
	})
	api := "http://" + srv.Addr + "/v1/intents"

	// Personal data: distinctive, so that any trace of it is found.
	secrets := []string{
		"grace.hopper.7731@example.org", "alan.turing.4410@example.net", "ada.lovelace.9012@example.com",
		"Diagnosis 5512 for Grace", "The results of your test 8821 are attached",
		"<b>balance 77123 EUR</b>",
	}
	email := func(to, subject string) string {
		return `{"effect": "email", "args": {"to": ["` + to + `"], "cc": ["alan.turing.4410@example.net"],
			"reply_to": "ada.lovelace.9012@example.com", "subject": "` + subject + `",
			"text": "The results of your test 8821 are attached", "html": "<b>balance 77123 EUR</b>"}}`
	}
	// One at a time, so that a fault queued for the sink's next message
	// meets that intent's attempt.
	for _, tc := range []struct {
		key   string
		fault sandbox.FaultKind
		want  outbox.State
	}{
		{"log-sent", "", outbox.StateSucceeded},
		{"log-refused", sandbox.FaultReject, outbox.StateFailed},
		{"log-lost", sandbox.FaultReset, outbox.StateUnknown},
	} {
		key, want := tc.key, tc.want
		if tc.fault != "" {
			sink.Misbehave(sandbox.Fault{Kind: tc.fault})
		}
		status, _ := apiCall(t, http.MethodPost, api, key, email("grace.hopper.7731@example.org", "Diagnosis 5512 for Grace"))
		require.Equal(t, http.StatusCreated, status)
		_, intent := apiCall(t, http.MethodGet, api+"/"+key+"?wait=20s", "", "")
		require.Equal(t, want, intent.State, key)
		// A duplicate, and a conflict under the same key.
		status, _ = apiCall(t, http.MethodPost, api, key, email("grace.hopper.7731@example.org", "Diagnosis 5512 for Grace"))
		require.Equal(t, http.StatusOK, status)
		status, _ = apiCall(t, http.MethodPost, api, key, email("grace.hopper.7731@example.org", "Diagnosis 5512 for Grace, again"))
		require.Equal(t, http.StatusUnprocessableEntity, status)
	}
	// Arguments refused at enqueue.
	status, _ := apiCall(t, http.MethodPost, api, "log-invalid", email("grace.hopper.7731@@example.org", "Diagnosis 5512 for Grace"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, 2, sink.Effects()) // the one sent, and the one whose outcome was lost

	require.Equal(t, 0, srv.Stop())
	out := srv.Logs()
	// The run was logged, at debug level, state changes and all.
	require.Contains(t, out, `"level":"DEBUG","msg":"intent state changed"`)
	require.Contains(t, out, `"level":"WARN","msg":"intent attempt failed"`)
	require.Contains(t, out, `"level":"ERROR","msg":"intent outcome unknown: an operator must resolve it"`)
	for _, s := range secrets {
		require.NotContains(t, out, s)
	}
	// Nor any address of the recipients' domains, in whatever form.
	for _, s := range []string{"example.org", "example.net", "grace.hopper", "alan.turing", "ada.lovelace"} {
		require.NotContains(t, strings.ToLower(out), s)
	}
}

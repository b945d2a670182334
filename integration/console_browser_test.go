package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/outbox"
)

// An operator and a reader use the console in a real browser (headless
// Chromium, driven by puppeteer-core) against a real serve: the operator
// signs in with a token, resolves an unknown email from the unknown queue
// and approves a charge (one charge at the Stripe stand-in), after a form
// carrying another args_sha256 was refused; a reader sees no button and a
// forged POST is 403; a cross-site POST is refused. axe-core finds no
// serious or critical violation on any page. CONSOLE_SCREENSHOTS names a
// directory to keep each page's screenshot in.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	chromium, node := browserTools(t)
	if _, err := os.Stat("browser/node_modules/axe-core"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("axe-core is missing; .ci/run installs it")
		}
		t.Skip("axe-core is missing: cd integration/browser && npm ci")
	}
	const (
		operatorToken = "tok-console-operator-0123"
		readerToken   = "tok-console-reader-01234"
	)
	p := newProviderEnv(t, true,
		"OUTBOX_API_TOKENS="+operatorToken+":default:operator,"+readerToken+":default:reader",
		"OUTBOX_APPROVAL=charge:amount>=10000")
	srv := p.serve()
	ctx := context.Background()

	lost := p.enqueueWithFaults(t, "lost-email", "email", effectArgs["email"], sandbox.Fault{Kind: sandbox.FaultReset})
	require.Equal(t, outbox.StateUnknown, p.waitIntent(t, lost.Key, 30*time.Second).State)
	big := p.enqueue(t, "big-charge", "charge", map[string]any{"customer": "cus_1", "amount": 25000, "currency": "usd", "payment_method": "pm_card_visa"})
	require.Equal(t, outbox.StateAwaitingApproval, big.State)
	keep := p.enqueue(t, "keep-waiting", "charge", map[string]any{"customer": "cus_2", "amount": 99000, "currency": "usd", "payment_method": "pm_card_visa"})
	require.Equal(t, outbox.StateAwaitingApproval, keep.State)

	shots := os.Getenv("CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, node, "console_check.mjs")
	cmd.Dir = "browser"
	cmd.Env = append(os.Environ(),
		"CHROME_PATH="+chromium,
		"CONSOLE_URL=http://"+srv.addr+"/console",
		"OPERATOR_TOKEN="+operatorToken,
		"READER_TOKEN="+readerToken,
		"UNKNOWN_KEY="+lost.Key,
		"APPROVE_KEY="+big.Key,
		"KEEP_KEY="+keep.Key,
		"NAMESPACE=default",
		"SCREENSHOT_DIR="+shots,
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "console_check: %s", stderr.String())

	type step struct {
		Status     int    `json:"status"`
		URL        string `json:"url"`
		Text       string `json:"text"`
		Redirected bool   `json:"redirected"`
		Buttons    int    `json:"buttons"`
		PostForms  int    `json:"postForms"`
	}
	var got struct {
		Axe   map[string][]json.RawMessage `json:"axe"`
		Steps struct {
			Unauthenticated        step `json:"unauthenticated"`
			OperatorSignIn         step `json:"operatorSignIn"`
			Resolve                step `json:"resolve"`
			OperatorApproveButtons int  `json:"operatorApproveButtons"`
			Mismatch               step `json:"mismatch"`
			Approve                step `json:"approve"`
			Bulk                   step `json:"bulk"`
			KeepFound              bool `json:"keepFound"`
			CrossSite              step `json:"crossSite"`
			ReaderSignIn           step `json:"readerSignIn"`
			ReaderApprovals        step `json:"reader-approvals"`
			ReaderIntent           step `json:"reader-intent"`
			ReaderForged           step `json:"readerForged"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), stdout.String())
	s := got.Steps

	// Without a session: the sign-in page, never data.
	require.Contains(t, s.Unauthenticated.URL, "/console/login")
	require.NotContains(t, s.Unauthenticated.Text, "lost-email")
	require.True(t, s.OperatorSignIn.Redirected)
	require.Contains(t, s.OperatorSignIn.URL, "/console/")
	require.NotContains(t, s.OperatorSignIn.URL, "/login")

	// The unknown email, resolved: in the database, by the console's actor.
	require.Equal(t, http.StatusOK, s.Resolve.Status)
	require.Contains(t, s.Resolve.Text, "found in the mailbox")
	resolved, err := p.client.Get(ctx, "", lost.Key)
	require.NoError(t, err)
	require.Equal(t, outbox.StateSucceeded, resolved.State)
	wantActor := access.ConsoleActor(access.NewToken(operatorToken, "default", access.RoleOperator).Fingerprint())
	require.NotNil(t, resolved.ResolvedBy)
	require.Equal(t, wantActor, *resolved.ResolvedBy)
	require.Equal(t, "found in the mailbox", *resolved.ResolutionNote)

	// Another args_sha256 was refused; the one shown approved, and the
	// charge happened once.
	require.Equal(t, http.StatusConflict, s.Mismatch.Status)
	require.Contains(t, s.Mismatch.Text, "approval_mismatch")
	require.Equal(t, http.StatusOK, s.Approve.Status)
	require.Contains(t, s.Approve.Text, "Approved")
	done := p.waitIntent(t, big.Key, 60*time.Second)
	require.Equal(t, outbox.StateSucceeded, done.State)
	require.Equal(t, wantActor, *done.ApprovedBy)
	require.Equal(t, 1, p.sb.Stripe.EffectsFor(done.ProviderKey), "exactly one charge for the approved intent")
	require.Equal(t, 1, p.sb.Stripe.Effects(), "and no other")
	require.Contains(t, s.Bulk.Text, "No pending intent matches")

	// The cross-site POST and the reader's forged POST released nothing.
	require.True(t, s.KeepFound)
	require.Equal(t, http.StatusForbidden, s.CrossSite.Status, s.CrossSite.Text)
	require.Contains(t, s.CrossSite.Text, "cross_origin_refused")
	require.Equal(t, http.StatusForbidden, s.ReaderForged.Status, s.ReaderForged.Text)
	require.Contains(t, s.ReaderForged.Text, "forbidden")
	kept, err := p.client.Get(ctx, "", keep.Key)
	require.NoError(t, err)
	require.Equal(t, outbox.StateAwaitingApproval, kept.State)
	require.Nil(t, kept.ApprovedBy)

	// The reader sees what the operator sees, without a button.
	require.Positive(t, s.OperatorApproveButtons)
	require.Contains(t, s.ReaderApprovals.Text, keep.Key)
	require.Contains(t, s.ReaderApprovals.Text, keep.ArgsSHA256)
	require.Contains(t, s.ReaderIntent.Text, keep.Key)
	for _, page := range []step{s.ReaderApprovals, s.ReaderIntent} {
		require.Zero(t, page.Buttons, "a reader gets no button")
		require.Zero(t, page.PostForms, "nor a form that changes anything")
	}

	// axe-core on every page: no serious or critical violation.
	require.GreaterOrEqual(t, len(got.Axe), 10, "every page was checked")
	for page, violations := range got.Axe {
		require.Empty(t, violations, "axe-core on %s", page)
	}
	t.Logf("screenshots in %s", shots)
}

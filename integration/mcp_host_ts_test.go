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

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/outbox"
)

// The npm package of the TypeScript SDK host, from this package's
// directory, and the files the test needs in it (integration/mcpts/README.md).
const (
	tsHostDir    = "mcpts"
	tsHostScript = "host.mjs"
	tsHostSDK    = "node_modules/@modelcontextprotocol/client/package.json"
)

// tsHostArgv returns the command line that runs integration/mcpts/host.mjs
// with node (never npx, which may fetch another version). Without node or
// the installed packages the test is skipped, except under CI (CI=true),
// where they must be there.
func tsHostArgv(t *testing.T) []string {
	t.Helper()
	missing := func(msg string) {
		t.Helper()
		msg += ": run npm ci in integration/" + tsHostDir
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
		return nil
	}
	dir, err := filepath.Abs(tsHostDir)
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, tsHostSDK)); err != nil {
		missing(filepath.Join("integration", tsHostDir, tsHostSDK) + " is missing")
		return nil
	}
	return []string{node, filepath.Join(dir, tsHostScript)}
}

// tsHostOutput is host.mjs's line on stdout.
type tsHostOutput struct {
	Result struct {
		IsError           bool `json:"isError"`
		StructuredContent struct {
			Key        string  `json:"key"`
			State      string  `json:"state"`
			ApprovedBy *string `json:"approved_by"`
		} `json:"structuredContent"`
	} `json:"result"`
	Elicitations []struct {
		Mode    string `json:"mode"`
		Message string `json:"message"`
		URL     string `json:"url"`
	} `json:"elicitations"`
	ProtocolVersion string `json:"protocolVersion"`
}

// TestMCPHostApprovalTypeScriptSDK approves from the host with the official
// MCP TypeScript SDK client (@modelcontextprotocol/client 2.4.0) against a
// real outboxd serve: the SDK's own multi round-trip driver hands outbox's
// input_required elicitation to the host's handler and retries the call
// with the answer and the requestState. Approved, the charge runs once at
// the Stripe stand-in; declined, it stays awaiting approval and nothing is
// charged; denied, it is cancelled; for an operator-only rule, a host that declares URL elicitation
// is handed the console's page of the intent, and its answer decides
// nothing.
func TestMCPHostApprovalTypeScriptSDK(t *testing.T) {
	t.Parallel()
	argv := tsHostArgv(t)
	const (
		token     = "tok-ts-host-4b1f0e93c27a"
		namespace = "shop"
		hostName  = "ts-sdk-host"
		publicURL = "https://outbox.example.com"
	)
	p := newProviderEnv(t, false,
		"OUTBOX_API_TOKENS="+token+":"+namespace,
		// Large charges: the person at the host decides. Emails: only
		// operators.
		"OUTBOX_APPROVAL=charge:amount>=1000[host],email")
	srv := p.serve()
	mcpURL := "http://" + srv.addr + "/mcp"
	actor := access.NewToken(token, namespace, access.RoleAgent).Actor()

	host := func(t *testing.T, url, tool string, args map[string]any, flags ...string) *tsHostOutput {
		t.Helper()
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmdArgs := append([]string{argv[1], "--url", url, "--tool", tool, "--args", string(raw), "--name", hostName}, flags...)
		cmd := exec.CommandContext(ctx, argv[0], cmdArgs...)
		// The token through the environment, as a host keeps it out of
		// its command line.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "OUTBOX_TOKEN=" + token}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("host.mjs %s %s: %v\n%s", tool, raw, err, stderr.String())
		}
		var out tsHostOutput
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "%s", stdout.String())
		require.Equal(t, "2026-07-28", out.ProtocolVersion, "the SDK spoke the modern protocol")
		return &out
	}
	intent := func(t *testing.T, key string) *outbox.Intent {
		t.Helper()
		got, err := p.client.Get(context.Background(), namespace, key)
		require.NoError(t, err)
		return got
	}
	// used lists the actions of the approval requests of an intent answered
	// from the host (each requestState consumed once, in PostgreSQL).
	used := func(t *testing.T, intentID int64) []string {
		t.Helper()
		rows, err := p.pool.Query(context.Background(),
			`SELECT action FROM `+p.table("outbox_mcp_state_used")+` WHERE intent_id = $1 ORDER BY used_at`, intentID)
		require.NoError(t, err)
		actions, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return actions
	}

	t.Run("Approved", func(t *testing.T) {
		args := map[string]any{"amount": 5000, "currency": "usd", "customer": "cus_ts_1",
			"payment_method": "pm_card_visa", "idempotency_key": "ts-approve"}
		out := host(t, mcpURL, "charge_card", args, "--decision", "approve")
		got := intent(t, "ts-approve")
		require.Len(t, out.Elicitations, 1, "one elicitation, answered by the SDK's driver")
		require.Equal(t, "form", out.Elicitations[0].Mode)
		require.Contains(t, out.Elicitations[0].Message, "charge_card")
		require.Contains(t, out.Elicitations[0].Message, got.ArgsSHA256)
		require.False(t, out.Result.IsError, "%+v", out.Result)
		require.Equal(t, "ts-approve", out.Result.StructuredContent.Key)
		require.NotEqual(t, "awaiting_approval", out.Result.StructuredContent.State, "the retried call carried the approval")
		require.NotNil(t, out.Result.StructuredContent.ApprovedBy, "the final answer shows the approval")
		require.Equal(t, []string{"approved"}, used(t, got.ID), "the requestState came back, and was consumed")

		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		done, err := p.client.Wait(ctx, namespace, "ts-approve")
		require.NoError(t, err, "intent did not end (last seen %+v)", done)
		require.Equal(t, outbox.StateSucceeded, done.State)
		require.NotNil(t, done.ApprovedBy)
		require.Equal(t, "host mcp:"+hostName+" "+actor, *done.ApprovedBy)
		require.NotNil(t, done.ApprovalNote)
		require.Equal(t, "via host", *done.ApprovalNote)
		require.Equal(t, "charge:amount>=1000[host]", *done.ApprovalRule)
		require.Equal(t, 1, done.Attempts)
		require.Equal(t, 1, p.sb.Stripe.EffectsFor(done.ProviderKey), "one charge at Stripe")
		require.Equal(t, 1, p.sb.Stripe.Effects())
	})

	t.Run("Declined", func(t *testing.T) {
		args := map[string]any{"amount": 2000, "currency": "usd", "customer": "cus_ts_2",
			"payment_method": "pm_card_visa", "idempotency_key": "ts-decline"}
		out := host(t, mcpURL, "charge_card", args, "--decision", "decline")
		got := intent(t, "ts-decline")
		require.Len(t, out.Elicitations, 1)
		require.Equal(t, "form", out.Elicitations[0].Mode)
		require.False(t, out.Result.IsError, "%+v", out.Result)
		require.Equal(t, "awaiting_approval", out.Result.StructuredContent.State)
		require.Equal(t, outbox.StateAwaitingApproval, got.State)
		require.Nil(t, got.ApprovedBy)
		require.Equal(t, []string{"decline"}, used(t, got.ID), "the decline consumed its request")
		require.Zero(t, p.sb.Stripe.RequestsFor(got.ProviderKey), "nothing sent to Stripe")
		require.Equal(t, 1, p.sb.Stripe.Effects(), "only the approved charge")
	})

	t.Run("Denied", func(t *testing.T) {
		args := map[string]any{"amount": 3000, "currency": "usd", "customer": "cus_ts_3",
			"payment_method": "pm_card_visa", "idempotency_key": "ts-deny"}
		out := host(t, mcpURL, "charge_card", args, "--decision", "deny", "--reason", "wrong customer")
		got := intent(t, "ts-deny")
		require.Len(t, out.Elicitations, 1)
		require.Equal(t, "cancelled", out.Result.StructuredContent.State)
		require.Equal(t, outbox.StateCancelled, got.State)
		require.Equal(t, "approval_denied", got.Error.Code)
		require.Equal(t, "wrong customer", got.Error.Message)
		require.NotNil(t, got.DeniedBy)
		require.Equal(t, "host mcp:"+hostName+" "+actor, *got.DeniedBy)
		require.Zero(t, p.sb.Stripe.RequestsFor(got.ProviderKey), "nothing sent to Stripe")
	})

	t.Run("OperatorRuleOpensTheConsole", func(t *testing.T) {
		args := map[string]any{"to": []string{"ann@example.com"}, "subject": "Your order", "text": "Shipped.",
			"idempotency_key": "ts-mail/1"}
		// A serve without OUTBOX_PUBLIC_URL has no page to hand out: the
		// call answers awaiting_approval without an elicitation.
		out := host(t, mcpURL, "send_email", args, "--url-elicitation")
		require.Empty(t, out.Elicitations)
		require.Equal(t, "awaiting_approval", out.Result.StructuredContent.State)

		withURL := p.serve("OUTBOX_PUBLIC_URL=" + publicURL)
		out = host(t, "http://"+withURL.addr+"/mcp", "send_email", args, "--url-elicitation", "--decision", "approve")
		got := intent(t, "ts-mail/1")
		require.Len(t, out.Elicitations, 1)
		e := out.Elicitations[0]
		require.Equal(t, "url", e.Mode)
		require.Equal(t, publicURL+"/console/intents/"+namespace+"/ts-mail%2F1", e.URL)
		require.Contains(t, e.Message, "An operator must approve send_email")
		require.Contains(t, e.Message, got.ArgsSHA256)
		// The host's answer (it opened the page) decides nothing.
		require.False(t, out.Result.IsError, "%+v", out.Result)
		require.Equal(t, "awaiting_approval", out.Result.StructuredContent.State)
		require.Equal(t, outbox.StateAwaitingApproval, got.State)
		require.Nil(t, got.ApprovedBy)
		require.Equal(t, []string{"url_accept"}, used(t, got.ID), "the URL request was consumed")
		require.Zero(t, p.sb.SMTP.Effects(), "no email sent")
	})
}

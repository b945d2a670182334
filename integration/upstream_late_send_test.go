package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox/mcpupstream"
	"github.com/outbox-dev/outbox/outbox"
)

// upstreamLateFile puts two test upstreams (each its own state) behind
// outbox, each with a reconcilable create_note whose listing lags its
// writes: settle covers the lag.
const upstreamLateFile = `upstreams:
  late:
    command: [%[1]s]
    env: {MCPUPSTREAM_STATE: "{env.LATE_STATE}"}
    timeout: 2s
    tools:
      create_note: %[2]s
  drifty:
    command: [%[1]s]
    env: {MCPUPSTREAM_STATE: "{env.DRIFTY_STATE}"}
    timeout: 2s
    tools:
      create_note: %[2]s
`

// lateCreateNote declares create_note: reconcilable, looked up in the
// upstream's listing, with a settle that covers the listing's lag.
const lateCreateNote = `{guarantee: reconcilable, marker: {arg: body, append: "\n<!-- outbox:{provider_key} -->"},
        lookup: {tool: list_notes, items: result.data.notes, match: item.body.contains(provider_key)}, settle: 14s}`

// upstreamLateAge is how old each intent is when it is first sent: older
// than settle and the call's timeout together, so that a settle measured
// from the intent's creation would take the lagging listing's "not found"
// at its word and send the note again.
const upstreamLateAge = 16 * time.Second

// TestUpstreamLateSend sends reconcilable upstream calls late, whose
// outcome is lost, to an upstream whose listing lags its writes: one after
// an approval, one after not_sent retries (its tool withdrawn by drift
// until the upstream lists it as pinned again). Each is looked up from its
// send, not from its creation, so the lag is waited out and each note is
// written once.
func TestUpstreamLateSend(t *testing.T) {
	t.Parallel()
	lateState, driftyState := t.TempDir(), t.TempDir()
	file := filepath.Join(t.TempDir(), "effects.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, upstreamLateFile, mcpupstreamBin(t), lateCreateNote), 0o600))
	u := newEnv(t, "OUTBOX_EFFECTS_FILE="+file, "LATE_STATE="+lateState, "DRIFTY_STATE="+driftyState, "OUTBOX_EFFECT_TIMEOUT=3s")
	stdout, stderr, code := u.run("effects", "pin", file)
	require.Equal(t, 0, code, "pin: %s%s", stdout, stderr)

	for _, state := range []string{lateState, driftyState} {
		require.NoError(t, mcpupstream.SetListLag(state, 12*time.Second))
		require.NoError(t, mcpupstream.SetFault(state, "create_note", mcpupstream.Fault{Mode: mcpupstream.FaultActThenDrop}))
	}
	// drifty lists create_note changed from its pin: withdrawn from the
	// start, its intents wait not_sent.
	require.NoError(t, mcpupstream.SetDrift(driftyState, mcpupstream.Drift{Changed: []string{"create_note"}}))
	p := u.serve()

	ctx := context.Background()
	start := time.Now()
	approved, err := u.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "late-approved", Effect: "late_create_note",
		Args: map[string]any{"title": "approved", "body": "sent after an approval"}, RequireApproval: true})
	require.NoError(t, err)
	require.Equal(t, outbox.StateAwaitingApproval, approved.Intent.State)
	_, err = u.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "late-drift", Effect: "drifty_create_note",
		Args: map[string]any{"title": "drift", "body": "sent after not_sent retries"}})
	require.NoError(t, err)

	// not_sent retries: the withdrawn tool's attempts send nothing.
	require.Eventually(t, func() bool {
		got, err := u.client.Get(ctx, "", "late-drift")
		return err == nil && got.State == outbox.StatePending && got.Error != nil && got.Error.Code == "upstream_drift"
	}, 30*time.Second, 100*time.Millisecond, "the withdrawn tool's intent waits not_sent")
	time.Sleep(time.Until(start.Add(upstreamLateAge)))
	got, err := u.client.Get(ctx, "", "late-drift")
	require.NoError(t, err)
	require.Equal(t, outbox.StatePending, got.State, "still withdrawn: %+v", got.Error)
	require.Zero(t, counts(t, driftyState)["create_note"])

	_, err = u.client.Approve(ctx, &outbox.ApprovalParams{Key: "late-approved", ArgsSHA256: approved.Intent.ArgsSHA256, By: "test"})
	require.NoError(t, err)
	require.NoError(t, mcpupstream.SetDrift(driftyState, mcpupstream.Drift{}))

	for key, state := range map[string]string{"late-approved": lateState, "late-drift": driftyState} {
		got := u.wait(key, 90*time.Second)
		require.Equal(t, outbox.StateSucceeded, got.State, "%s: %+v\n%s", key, got.Error, p.output())
		require.Contains(t, string(got.Result), `"reconciled": true`, "%s: found by the look-up once the lag passed", key)
		notes, err := mcpupstream.Notes(state)
		require.NoError(t, err)
		require.Len(t, notes, 1, "%s: one note", key)
		require.True(t, strings.Contains(notes[0].Body, "outbox:"+got.ProviderKey), "%s: the note carries the marker", key)
		t.Logf("upstream late send: %s %s after %d attempts, %s after its creation", key, got.State, got.Attempts, got.UpdatedAt.Sub(got.CreatedAt).Round(time.Second))
	}
}

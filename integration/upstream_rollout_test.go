package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/sandbox/mcpupstream"
	"github.com/outbox-dev/outbox/outbox"
)

// TestUpstreamRollout re-pins an upstream under two replicas: the first
// runs the older lock while calls are in flight, the second starts with
// the new one (which records it, so the first stops working the upstream's
// queue), and the first is restarted with the new lock. Every write lands
// at the upstream once, and nothing that may have been sent ends failed.
func TestUpstreamRollout(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	dir := t.TempDir()
	v1 := fmt.Sprintf(upstreamsFile, mcpupstreamBin(t))
	// The re-pin changes set_label's guarantee: another lock, and another
	// declaration of the tool.
	v2 := strings.Replace(v1, "      set_label:\n        guarantee: at_most_once\n", "      set_label:\n        guarantee: deduplicated\n        retry_safe: true\n", 1)
	require.NotEqual(t, v1, v2)
	files := map[string]string{"v1": filepath.Join(dir, "v1.yaml"), "v2": filepath.Join(dir, "v2.yaml")}
	require.NoError(t, os.WriteFile(files["v1"], []byte(v1), 0o600))
	require.NoError(t, os.WriteFile(files["v2"], []byte(v2), 0o600))
	u := newEnv(t, "NOTES_STATE="+state, "OUTBOX_EFFECT_TIMEOUT=5s")
	for _, f := range files {
		stdout, stderr, code := u.run("effects", "pin", f)
		require.Equal(t, 0, code, "pin %s: %s%s", f, stdout, stderr)
	}
	// Every create_note takes a while at the upstream: calls are in flight
	// at each step of the rollout.
	require.NoError(t, mcpupstream.SetFault(state, "create_note", mcpupstream.Fault{Mode: mcpupstream.FaultHang, Delay: 700 * time.Millisecond, Times: -1}))

	ctx := context.Background()
	var keys []string
	enqueue := func(round string, n int) {
		for i := range n {
			note, msg := fmt.Sprintf("note-%s-%d", round, i), fmt.Sprintf("msg-%s-%d", round, i)
			_, err := u.client.Enqueue(ctx, &outbox.EnqueueParams{Key: note, Effect: "notes_create_note", Args: map[string]any{"title": note, "body": note}})
			require.NoError(t, err)
			_, err = u.client.Enqueue(ctx, &outbox.EnqueueParams{Key: msg, Effect: "notes_send_message", Args: map[string]any{"to": msg, "text": msg}})
			require.NoError(t, err)
			keys = append(keys, note, msg)
		}
	}

	old := u.serve("OUTBOX_EFFECTS_FILE=" + files["v1"])
	enqueue("old", 6)
	time.Sleep(time.Second)
	newer := u.serve("OUTBOX_EFFECTS_FILE=" + files["v2"])
	enqueue("mixed", 6)
	label := func(key string) {
		_, err := u.client.Enqueue(ctx, &outbox.EnqueueParams{Key: key, Effect: "notes_set_label", Args: map[string]any{"item": key, "label": "l"}})
		require.NoError(t, err)
		keys = append(keys, key)
	}
	label("label-mixed")
	// The new replica recorded its lock: the old one stops working the
	// upstream's queue (its calls in flight finish), rather than calling
	// set_label under the older declaration.
	old.waitFor("upstream queue held", 30*time.Second)
	// The old replica is restarted with the new lock: SIGTERM lets its
	// calls in flight finish.
	old.signal(syscall.SIGTERM)
	select {
	case <-old.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the old replica did not stop")
	}
	u.serve("OUTBOX_EFFECTS_FILE=" + files["v2"])
	enqueue("new", 4)
	label("label-new")

	created := map[string]bool{}
	for _, key := range keys {
		got := u.wait(key, 120*time.Second)
		require.False(t, got.State == outbox.StateFailed && got.MaybeSent, "%s: failed though it may have been sent: %+v", key, got.Error)
		require.Equal(t, outbox.StateSucceeded, got.State, "%s: %+v\n%s", key, got.Error, newer.output())
		if strings.HasPrefix(key, "note-") {
			created[got.ProviderKey] = true
		}
	}
	notes, err := mcpupstream.Notes(state)
	require.NoError(t, err)
	byKey := map[string]int{}
	for _, n := range notes {
		for pk := range created {
			if strings.Contains(n.Body, pk) {
				byKey[pk]++
			}
		}
	}
	require.Len(t, notes, len(created), "one note per intent: %v", byKey)
	for pk := range created {
		require.Equal(t, 1, byKey[pk], "note of %s", pk)
	}
	msgs, err := mcpupstream.Messages(state)
	require.NoError(t, err)
	perTo := map[string]int{}
	for _, m := range msgs {
		perTo[m.To]++
	}
	for to, n := range perTo {
		require.Equal(t, 1, n, "messages to %s", to)
	}
	require.Len(t, perTo, len(keys)/2-1, "every message sent")
	t.Logf("upstream rollout: %d intents, %d notes, %d messages, 0 duplicates", len(keys), len(notes), len(msgs))
}

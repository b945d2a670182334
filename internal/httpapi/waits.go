package httpapi

import (
	"context"
	"fmt"
	"slices"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/outbox"
)

// MaxWaitsDefault is NewWaits's default: OUTBOX_MAX_WAITS's. Waits share one
// LISTEN connection (outbox.Client.Wait), so a wait costs a goroutine, not a
// database connection.
const MaxWaitsDefault = 1000

// Waits bounds the waits in progress at once (?wait= and /mcp's
// get_intent's wait_seconds; mcpserver.Config's WaitFunc is its Wait),
// shared fairly by namespace: each namespace gets an equal share, so one
// tenant's waits never delay another's. It is safe for concurrent use.
type Waits struct {
	client *outbox.Client
	// slots are the namespaces' shares.
	slots map[string]chan struct{}
}

// NewWaits returns waits of client bounded to maxWaits in all, shared by
// namespaces (Namespaces). A maxWaits of 0 is MaxWaitsDefault.
func NewWaits(client *outbox.Client, maxWaits int, namespaces []string) (*Waits, error) {
	if maxWaits < 0 {
		return nil, fmt.Errorf("httpapi: MaxWaits must be positive, not %d", maxWaits)
	}
	if maxWaits == 0 {
		maxWaits = MaxWaitsDefault
	}
	w := &Waits{client: client, slots: make(map[string]chan struct{}, len(namespaces))}
	for _, namespace := range namespaces {
		w.slots[namespace] = make(chan struct{}, max(1, maxWaits/len(namespaces)))
	}
	return w, nil
}

// Namespaces are the namespaces tokens act for, each once, or
// outbox.NamespaceDefault alone without tokens: those the API and /mcp
// serve.
func Namespaces(tokens []access.Token) []string {
	if len(tokens) == 0 {
		return []string{outbox.NamespaceDefault}
	}
	var namespaces []string
	for _, t := range tokens {
		if !slices.Contains(namespaces, t.Namespace) {
			namespaces = append(namespaces, t.Namespace)
		}
	}
	return namespaces
}

// Wait waits until the intent is terminal or ctx ends. It reads first: most
// waits are for intents already final, and those answer at once whatever
// other waits are doing. Only then does it take a slot of its namespace's
// share. A wait that gets no slot in time returns ctx's error and no
// intent; callers then read it again and answer it as it stands.
func (w *Waits) Wait(ctx context.Context, namespace, key string) (*outbox.Intent, error) {
	intent, err := w.client.Get(ctx, namespace, key)
	if err != nil || intent.State.Terminal() {
		return intent, err
	}
	slots := w.slots[namespace]
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	case <-ctx.Done():
		// No intent: the caller reads it again, as it stands now.
		return nil, ctx.Err()
	}
	return w.client.Wait(ctx, namespace, key)
}

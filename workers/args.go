package workers

import "time"

// The River jobs' args. Their kinds are stored with every job: they never
// change, so that jobs inserted by an earlier version still find their
// worker.

// IntentArgs is the River job of one intent. It carries only the intent's id,
// so River UI never shows an agent's arguments or personal data.
type IntentArgs struct {
	// Effect is the intent's effect when the job's queue is not named
	// after it (effects.Queuer: an MCP upstream's tools share one queue);
	// empty otherwise, the queue then naming the effect.
	Effect string `json:"effect,omitempty"`
	// IntentID is the intent.
	IntentID int64 `json:"intent_id"`
}

// Kind implements river.JobArgs.
func (IntentArgs) Kind() string { return "outbox_intent" }

// IntentBatchArgs is the River job of a batch of first attempts: intents of
// one deduplicated effect, dispatched together so that River's writes of a
// job are paid once per batch instead of once per intent. Like IntentArgs it
// carries only ids. See docs/design.md, "First attempts in batches".
type IntentBatchArgs struct {
	// IntentIDs are the batch's intents.
	IntentIDs []int64 `json:"intent_ids"`
}

// Kind implements river.JobArgs.
func (IntentBatchArgs) Kind() string { return "outbox_intent_batch" }

// PruneArgs is the periodic job that prunes terminal intents.
type PruneArgs struct{}

// Kind implements river.JobArgs.
func (PruneArgs) Kind() string { return "outbox_prune" }

// ReconcileArgs is the periodic job that repairs intents whose River job is
// finished or gone.
type ReconcileArgs struct{}

// Kind implements river.JobArgs.
func (ReconcileArgs) Kind() string { return "outbox_reconcile" }

// ApprovalNoticeArgs is the job that tells the approval webhook's endpoint
// (dispatcher.Config.ApprovalWebhook) that an intent awaits approval.
type ApprovalNoticeArgs struct {
	// IntentID is the intent awaiting approval.
	IntentID int64 `json:"intent_id"`
}

// Kind implements river.JobArgs.
func (ApprovalNoticeArgs) Kind() string { return "outbox_approval_notice" }

// ApprovalNoticeType is the notice's "type".
const ApprovalNoticeType = "outbox.approval_requested"

// ApprovalNotice is the payload of the webhook that announces an intent
// awaiting approval: everything a person needs to decide, and the
// args_sha256 an approval must name.
type ApprovalNotice struct {
	Type      string    `json:"type"`
	ID        int64     `json:"intent_id"`
	Namespace string    `json:"namespace"`
	Key       string    `json:"key"`
	Effect    string    `json:"effect"`
	Args      any       `json:"args"`
	ArgsSHA   string    `json:"args_sha256"`
	Rule      string    `json:"rule"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

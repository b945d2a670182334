package riverworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
	"github.com/outbox-dev/outbox/workers"
)

// ApprovalNoticeWorkerConfig configures an ApprovalNoticeWorker.
type ApprovalNoticeWorkerConfig struct {
	// Endpoint is the webhook endpoint told. Required.
	Endpoint string
	// TTL is how long an intent may await approval, for the notice's
	// expires_at. Defaults to workers.ApprovalTTLDefault.
	TTL time.Duration
	// Webhook is the webhook effect, which signs and sends. Required.
	Webhook effects.Effect
	// Schema holds the outbox tables. Defaults to outbox.SchemaDefault.
	Schema string
}

// ApprovalNoticeWorker sends the approval webhook through the webhook
// effect: the effect's Standard Webhooks signature, and a webhook-id of its
// own ("approval_" and the intent's provider key), the same on every retry,
// so a receiver that dedupes on it shows each request once. A notice that
// failed is retried by River; one whose intent was decided meanwhile is not
// sent.
type ApprovalNoticeWorker struct {
	river.WorkerDefaults[workers.ApprovalNoticeArgs]

	endpoint string
	pool     *pgxpool.Pool
	queries  *intentdb.Queries
	ttl      time.Duration
	webhook  effects.Effect
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *ApprovalNoticeWorkerConfig) withDefaults() *ApprovalNoticeWorkerConfig {
	if c == nil {
		c = &ApprovalNoticeWorkerConfig{}
	}
	out := *c
	if out.Schema == "" {
		out.Schema = outbox.SchemaDefault
	}
	if out.TTL == 0 {
		out.TTL = workers.ApprovalTTLDefault
	}
	return &out
}

// validate checks a config with its defaults, and that the webhook effect
// knows the endpoint.
func (c *ApprovalNoticeWorkerConfig) validate() error {
	if c.Webhook == nil || c.Endpoint == "" || c.TTL < 0 {
		return errors.New("workers: Endpoint and Webhook must be set, and TTL positive")
	}
	probe, _ := json.Marshal(map[string]any{"endpoint": c.Endpoint, "payload": map[string]any{}}) //nolint:errchkjson // plain values
	if err := c.Webhook.ValidateArgs(probe); err != nil {
		return fmt.Errorf("approval webhook: %w", err)
	}
	return nil
}

// NewApprovalNoticeWorker returns an ApprovalNoticeWorker. It checks that
// the webhook effect knows the endpoint.
func NewApprovalNoticeWorker(pool *pgxpool.Pool, config *ApprovalNoticeWorkerConfig) (*ApprovalNoticeWorker, error) {
	c := config.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &ApprovalNoticeWorker{
		endpoint: c.Endpoint,
		pool:     pool,
		queries:  intentdb.New(c.Schema),
		ttl:      c.TTL,
		webhook:  c.Webhook,
	}, nil
}

// Work sends one notice.
func (w *ApprovalNoticeWorker) Work(ctx context.Context, job *river.Job[workers.ApprovalNoticeArgs]) error {
	row, err := w.queries.GetByID(ctx, w.pool, job.Args.IntentID)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && row.State != string(outbox.StateAwaitingApproval)) {
		return nil // decided (or pruned) before anyone had to be told
	}
	if err != nil {
		return fmt.Errorf("error reading intent: %w", err)
	}
	rule := outbox.ApprovalRequested
	if row.ApprovalRule != nil {
		rule = *row.ApprovalRule
	}
	args, err := json.Marshal(map[string]any{"endpoint": w.endpoint, "payload": workers.ApprovalNotice{
		Type:      workers.ApprovalNoticeType,
		ID:        row.ID,
		Namespace: row.Namespace,
		Key:       row.Key,
		Effect:    row.Effect,
		Args:      row.Args,
		ArgsSHA:   outbox.ArgsSHA256(row.Args),
		Rule:      rule,
		CreatedAt: row.CreatedAt,
		ExpiresAt: row.CreatedAt.Add(w.ttl),
	}})
	if err != nil {
		return fmt.Errorf("error encoding approval notice: %w", err)
	}
	_, err = w.webhook.Execute(ctx, &effects.Request{
		Args:        args,
		Attempt:     job.Attempt,
		IntentID:    row.ID,
		Namespace:   row.Namespace,
		ProviderKey: "approval_" + row.ProviderKey,
	})
	if err != nil {
		return fmt.Errorf("approval notice for intent %d: %w", row.ID, err)
	}
	return nil
}

package outboxtest

import (
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
)

// intentFromRow is the public form of a row, as outbox's Get and List
// return it. The assertions read through intentdb rather than a Client
// because they take the caller's transaction, which outbox's reads do not.
func intentFromRow(r *intentdb.Row) *outbox.Intent {
	return &outbox.Intent{
		ID:             r.ID,
		Namespace:      r.Namespace,
		Key:            r.Key,
		Effect:         r.Effect,
		Args:           r.Args,
		ArgsSHA256:     outbox.ArgsSHA256(r.Args),
		State:          outbox.State(r.State),
		Attempts:       r.Attempt,
		Result:         r.Result,
		Error:          (*outbox.IntentError)(r.Error),
		ProviderKey:    r.ProviderKey,
		RequestedBy:    r.RequestedBy,
		EnqueuedBy:     r.EnqueuedBy,
		KeySource:      outbox.KeySource(r.KeySource),
		CreatedAt:      r.CreatedAt,
		UpdatedAt:      r.UpdatedAt,
		CompletedAt:    r.CompletedAt,
		JobID:          r.JobID,
		JobKind:        r.JobKind,
		LeaseExpiresAt: r.LeaseExpiresAt,
		MaybeSent:      r.MaybeSent,
		ResolvedBy:     r.ResolvedBy,
		ResolutionNote: r.ResolutionNote,
		ResolvedAt:     r.ResolvedAt,
		ApprovalRule:   r.ApprovalRule,
		ApprovedBy:     r.ApprovedBy,
		ApprovedAt:     r.ApprovedAt,
		DeniedBy:       r.DeniedBy,
		DeniedAt:       r.DeniedAt,
		ApprovalNote:   r.ApprovalNote,
	}
}

package riverworker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
)

// claimed is an intent as a claim (or, for deduplicated effects, a read)
// returns it: the attempt about to be made.
type claimed struct {
	intentdb.AttemptRow
	// prevState is the intent's state before this attempt: pending, or
	// running when an earlier attempt's outcome was lost.
	prevState outbox.State
	// expectState and expectAttempt are what the finish requires the row to
	// still be: running under Attempt after a claim; pending under the
	// attempt number read, for a deduplicated effect, which is not claimed.
	expectState   outbox.State
	expectAttempt int
	// jobAttempt is the River attempt running this attempt.
	jobAttempt int
	// expectJobID, when not 0, is the batch job the finish requires the
	// intent to still belong to.
	expectJobID int64
}

// claimOutcome is the answer to one claim: either the claimed intent, or why
// nothing was claimed.
type claimOutcome struct {
	claimed *claimed
	// Set when claimed is nil:
	found          bool
	state          outbox.State
	leaseExpiresAt *time.Time
}

type claimReq struct {
	id    int64
	lease time.Duration
	// decl is the declaration the attempt sends under (a declared
	// effect's), recorded by the claim; "" for a built-in effect.
	decl string
}

// store runs the worker's batches through the intent table's statements.
type store struct {
	pool    *pgxpool.Pool
	queries *intentdb.Queries
}

// claimBatch claims a batch of intents in one statement. Leases within one
// batch are the same (one effect timeout per process), so the first is used.
func (s *store) claimBatch(ctx context.Context, reqs []claimReq) ([]claimOutcome, error) {
	ids := make([]int64, len(reqs))
	decls := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i], decls[i] = r.id, r.decl
	}
	byID, err := s.queries.Claim(ctx, s.pool, ids, reqs[0].lease, decls)
	if err != nil {
		return nil, fmt.Errorf("error claiming intents: %w", err)
	}
	outs := make([]claimOutcome, len(reqs))
	var missing []int64
	for i, r := range reqs {
		if a, ok := byID[r.id]; ok {
			outs[i].claimed = &claimed{
				AttemptRow:    *a,
				prevState:     outbox.State(a.State),
				expectState:   outbox.StateRunning,
				expectAttempt: a.Attempt,
			}
			delete(byID, r.id) // the same id twice in a batch claims once
		} else {
			missing = append(missing, r.id)
		}
	}
	if len(missing) == 0 {
		return outs, nil
	}

	// Rare: terminal intents (a re-run job) or live leases (a job rescued
	// while its first worker still runs). Say which, so the worker can
	// finish or snooze.
	statuses, err := s.queries.Statuses(ctx, s.pool, missing)
	if err != nil {
		return nil, fmt.Errorf("error reading unclaimed intents: %w", err)
	}
	for i, r := range reqs {
		if outs[i].claimed != nil {
			continue
		}
		if st, ok := statuses[r.id]; ok {
			outs[i] = claimOutcome{found: true, state: outbox.State(st.State), leaseExpiresAt: st.LeaseExpiresAt}
		}
	}
	return outs, nil
}

// finishBatch records a batch of outcomes in one statement, and reports for
// each whether the fenced write matched (false: a stale attempt).
func (s *store) finishBatch(ctx context.Context, fs []intentdb.Finish) ([]bool, error) {
	applied, err := s.queries.Finish(ctx, s.pool, fs)
	if err != nil {
		return nil, fmt.Errorf("error recording outcomes: %w", err)
	}
	outs := make([]bool, len(fs))
	for i, f := range fs {
		outs[i] = applied[intentdb.Applied{ID: f.ID, Attempt: f.Attempt}]
	}
	return outs, nil
}

// readBatch reads a batch of intents in one statement. A nil entry is an
// intent that does not exist (pruned).
func (s *store) readBatch(ctx context.Context, ids []int64) ([]*intentdb.AttemptRow, error) {
	byID, err := s.queries.Read(ctx, s.pool, ids)
	if err != nil {
		return nil, fmt.Errorf("error reading intents: %w", err)
	}
	outs := make([]*intentdb.AttemptRow, len(ids))
	for i, id := range ids {
		outs[i] = byID[id]
	}
	return outs, nil
}

// markMaybeSent records that an attempt may have reached the provider, for an
// attempt whose fenced finish was rejected.
func (s *store) markMaybeSent(ctx context.Context, id int64) error {
	if err := s.queries.MarkMaybeSent(ctx, s.pool, id); err != nil {
		return fmt.Errorf("error recording a stale attempt: %w", err)
	}
	return nil
}

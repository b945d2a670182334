// Package riverworker holds outbox's River workers, which the dispatcher
// configures and runs (users configure them through dispatcher.Config):
// IntentWorker, which executes each intent's effect once, doing what the
// state machine (workers.Decide) says; IntentBatchWorker, which runs the
// first attempts of many deduplicated intents in one River job, each exactly
// as IntentWorker runs it (docs/design.md, "First attempts in batches");
// ReconcileWorker, which gives every intent whose River job is finished or
// gone a fresh job; PruneWorker, which deletes terminal intents past their
// retention (never unknown ones); and ApprovalNoticeWorker, which announces
// intents awaiting approval. Their jobs' args, with their kinds, are
// package workers'.
//
// # Ordering, and why it is cheap
//
// An attempt is three steps, each committed before the next begins:
//
//  1. Claim (reconcilable and at-most-once effects): pending, or running
//     with an expired lease, becomes running with a fresh attempt number and
//     a lease. It is committed before the provider is called, so that a lost
//     outcome is always visible afterwards as "running with an expired
//     lease" and never guessed. A deduplicated effect is not claimed: the
//     provider dedupes concurrent attempts on the provider key, so the
//     claim's write would buy nothing. Its attempt reads the intent instead,
//     and learns of a lost earlier attempt from River's attempt counter
//     (an attempt that recorded nothing died).
//  2. Execute the effect, with no transaction open.
//  3. Finish: the outcome is written only if the intent is still as the
//     attempt left it (running under its attempt number after a claim;
//     pending under the attempt number it read otherwise). A stale
//     attempt's write matches no row; it is rejected and counted.
//
// The River job is completed last, by River's own batched completer, after
// the worker returns. If the process dies between the finish and River's
// completion, the job is rescued and runs again, finds a terminal intent and
// does nothing: the intent row, not the job, is the record of truth. No
// transaction of the worker's own completes the job. Because River's
// completion is not fenced by attempt, a worker returns nil only once it saw
// its intent terminal: a stale attempt whose write was rejected returns
// StaleAttemptError, so that it never completes the job another attempt
// still needs. Whatever else strands an intent (an operator's cancel or
// delete in River UI, a job discarded after its attempts) is repaired by
// ReconcileWorker.
//
// Claims, reads and finishes of concurrent workers are grouped by a batcher
// into one statement each (group commit), so on a loaded process the
// database sees a few statements per batch instead of two transactions per
// intent. Under light load a batch is a single request and nothing waits for
// company.
package riverworker

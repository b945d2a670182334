// Package dispatcher runs the outbox: the drain, which turns committed
// pending intents into River jobs, and the River client whose workers execute
// them (package workers).
//
// # The drain
//
// An enqueue writes only the intent row, in the caller's transaction, and
// notifies at commit. The drain, woken by that notification (and by a slow
// poll as a safety net), takes a batch of intents that have no job yet with
// FOR UPDATE SKIP LOCKED, inserts their River jobs in bulk and records each
// job's id on its intent, all in one transaction. Because the jobs and the
// marks commit together, a drain that dies mid-batch leaves nothing behind,
// and because SKIP LOCKED hands every row to exactly one drain, any number of
// replicas drain at once: every intent gets exactly one River job.
//
// By default that job is shared: the deduplicated intents of one drain,
// per effect and namespace, go to one batch job (kind outbox_intent_batch)
// that runs their first attempts, and an intent its first attempt does not
// end is handed over to a job of its own (Config.DisableBatchFirstAttempts;
// docs/design.md, "First attempts in batches").
package dispatcher

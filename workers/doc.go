// Package workers holds the intent state machine and what users see of
// outbox's River jobs. Decide is the whole machine, as one pure function
// from an attempt's facts to its next step. The jobs' args (IntentArgs,
// IntentBatchArgs, ReconcileArgs, PruneArgs, ApprovalNoticeArgs) name their
// kinds, which River UI shows and stored jobs keep; AttemptOutput and
// BatchOutput are the outputs River UI shows on a job's page; Metrics are
// the workers' Prometheus metrics, and the Default constants the defaults
// of the settings dispatcher.Config takes.
//
// The workers themselves are run, and configured, by the dispatcher
// (package dispatcher); how an attempt is ordered, and why that is cheap,
// is told in internal/riverworker's documentation.
package workers

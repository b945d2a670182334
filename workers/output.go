package workers

// AttemptOutput is what an attempt records as its River job's output
// (river.RecordOutput), so that River UI's job page says what happened
// without leaving it: never the key or the arguments, which can carry
// personal data.
type AttemptOutput struct {
	// Attempt is the intent's attempt number.
	Attempt int `json:"attempt,omitempty"`
	// ErrorCode is the recorded error's code, if any.
	ErrorCode string `json:"error_code,omitempty"`
	// IntentID is the intent.
	IntentID int64 `json:"intent_id"`
	// ProviderObjectID is the id of what the provider made (a
	// PaymentIntent, a ticket, a Message-ID), when it says.
	ProviderObjectID string `json:"provider_object_id,omitempty"`
	// State is the state this attempt left the intent in, "stale" when
	// another attempt had taken it over, or the state it found it in.
	State string `json:"state"`
}

// BatchOutput is what a batch job records as its River job output, so that
// River UI's page of the batch says what became of each of its intents.
type BatchOutput struct {
	// Ended is how many of its intents the batch left terminal.
	Ended int `json:"ended"`
	// HandedOver is how many went on to a job of their own.
	HandedOver int `json:"handed_over"`
	// Intents lists each of the batch's intents, in id order: its id and
	// end state, never its key or arguments, which can carry personal
	// data.
	Intents []BatchIntentOutput `json:"intents"`
	// Skipped is how many belonged to another job by the time it ran.
	Skipped int `json:"skipped"`
}

// BatchIntentOutput is what a batch did with one of its intents.
type BatchIntentOutput struct {
	// Attempt is the intent's attempt number when the batch was done with
	// it.
	Attempt int `json:"attempt,omitempty"`
	// ErrorCode is the code of the error recorded on the intent, if any.
	ErrorCode string `json:"error_code,omitempty"`
	// HandedOverTo is the River job of its own the intent went on to, when
	// its first attempt did not end it.
	HandedOverTo int64 `json:"handed_over_to,omitempty"`
	// HandOverReason says why it was handed over: "not_begun" (the batch
	// ran out of time, or was stopped, before its attempt began), "retry"
	// (its attempt needs another; ErrorCode says why), "retry_after" (the
	// provider asked to come back later) or "outcome_not_recorded" (the
	// attempt may have reached the provider and its outcome could not be
	// recorded, or the effect panicked: the intent is marked maybe_sent).
	HandOverReason string `json:"hand_over_reason,omitempty"`
	// IntentID is the intent.
	IntentID int64 `json:"intent_id"`
	// State is the state the batch left the intent in, read once the batch
	// was done: terminal, or "pending" when handed over. It is "skipped"
	// for an intent that belonged to another job by then (the reconciler
	// re-dispatched it, or an earlier run of the batch handed it over).
	State string `json:"state"`
}

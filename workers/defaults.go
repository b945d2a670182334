package workers

import (
	"time"

	"github.com/outbox-dev/outbox/effects"
)

// Defaults of the workers' settings, which dispatcher.Config takes.
const (
	// ApprovalTTLDefault is how long an intent may await approval before
	// it is cancelled with error approval_expired.
	ApprovalTTLDefault = 24 * time.Hour
	// EffectTimeoutDefault is one attempt's deadline: effects.TimeoutDefault,
	// which declared effects bound their requests' timeouts by too.
	EffectTimeoutDefault = effects.TimeoutDefault
	// MaxAttemptsDefault is the number of attempts per intent.
	MaxAttemptsDefault = 25
	// ReconcileIntervalDefault is how often intents whose River job is
	// finished or gone are repaired.
	ReconcileIntervalDefault = 10 * time.Second
	// RetentionDefault is how long terminal intents are kept.
	RetentionDefault = 168 * time.Hour
)

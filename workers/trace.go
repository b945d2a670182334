package workers

// TracerName is the instrumentation scope of the attempts' spans.
const TracerName = "github.com/outbox-dev/outbox/workers"

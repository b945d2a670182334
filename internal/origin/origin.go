// Package origin carries, in an enqueue's context, what outboxd's own
// surfaces (the HTTP API, the MCP server, the command line) know of where
// the enqueue comes from and the library's callers cannot say: the actor the
// request's credentials name, and how its key was made. Package outbox
// records both on the intent it writes.
//
// They travel in the context, as the enqueue's trace span does, rather than
// in outbox.EnqueueParams: they are facts of the request, established by
// authentication and the key guard, and a field a library caller could set
// would let it claim them. Being internal, only outboxd's packages can set
// them.
package origin

import "context"

// Origin is where an enqueue comes from.
type Origin struct {
	// EnqueuedBy is the audit actor the request's credentials name
	// (internal/access: "api:" and an API token's fingerprint, "cli:" and
	// a user). Empty records none.
	EnqueuedBy string
	// KeySource is how the key was made: "explicit", "auto" or
	// "model_confirmed" (outbox.KeySource). Empty records "explicit".
	KeySource string
}

type contextKey struct{}

// With returns ctx carrying o.
func With(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, contextKey{}, o)
}

// From returns the origin ctx carries, the zero Origin when none.
func From(ctx context.Context) Origin {
	o, _ := ctx.Value(contextKey{}).(Origin)
	return o
}

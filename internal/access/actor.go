package access

import (
	"os"
	"os/user"
)

// The audit actor names who acted on an intent, from the credentials the
// act came with, never from what a client says of itself: it is what an
// intent records as enqueued_by, resolved_by, approved_by and denied_by.
// It is spelled one of two ways:
//
//   - "api:" and the API token's fingerprint (Token.Actor), or "api:local"
//     for a loopback request to a server without tokens: the HTTP API and
//     /mcp.
//   - "cli:" and the operating system's user name (CLIActor): the command
//     line, and outboxd mcp over stdio, which act as the local user.
//   - "console:" and the token's fingerprint, the River UI user's name, or
//     "local" (ConsoleActor): the operator console, for whoever signed in.

// ActorLocal is the name APIActor is given for a request to a server
// without tokens, which answers only on loopback.
const ActorLocal = "local"

// APIActor returns the actor of an API request made with the token whose
// fingerprint is name (ActorLocal without tokens): "api:" and name.
func APIActor(name string) string { return "api:" + name }

// ConsoleActor returns the actor of a change made in the operator console
// by name: the fingerprint of the token its user signed in with, the River
// UI basic-auth user's name, or ActorLocal for a loopback request to a
// server without credentials. It is "console:" and name.
func ConsoleActor(name string) string { return "console:" + name }

// CLIActor returns the actor of the command line's user: "cli:" and the
// operating system's user name ($USER when it cannot be looked up), or
// "cli" when neither is known.
func CLIActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "cli:" + u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return "cli:" + name
	}
	return "cli"
}

// Package access is who may do what, in one place: API tokens and the
// namespaces they act for (Token, ParseTokens, ParseTokenFile, Match), the
// ordered roles (Role: reader < agent < operator), the role each action
// needs (Action, Allow), what a request without a token may be trusted by
// (FromLoopback, BasicAuthMatches), and the audit actor that names who
// acted on an intent (APIActor, CLIActor, ConsoleActor). The HTTP API, the
// MCP server, the command line, the operator console and River UI's guard
// use it, so that a token is looked up, a role ranked, an action allowed
// and an actor spelled one way.
package access

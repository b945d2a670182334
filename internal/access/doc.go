// Package access is who may do what, in one place: API tokens and the
// namespaces they act for (Token, ParseTokens, ParseTokenFile, Match), the
// ordered roles (Role: reader < agent < operator), and the audit actor that
// names who acted on an intent (APIActor, CLIActor, ConsoleActor). The HTTP
// API, the MCP server, the command line and the operator console use it, so
// that a token is looked up, a role ranked and an actor spelled one way.
package access

// Package access is who may do what, in one place: API tokens and the
// namespaces they act for (Token, ParseTokens, ParseTokenFile), the ordered
// roles (Role: reader < agent < operator), and the audit actor that names
// who acted on an intent (APIActor, CLIActor). The HTTP API, the MCP server
// and the command line use it, so that a role is ranked and an actor spelled
// one way.
package access

package cli

import (
	"fmt"
	"net"

	"github.com/outbox-dev/outbox/internal/httpapi"
)

// checkAPIAuth refuses, in one line, to serve the API without tokens on an
// address other than loopback (docs/operations.md): without tokens,
// every request acts for namespace default, unauthenticated.
func checkAPIAuth(cfg *Config) error {
	if len(cfg.APITokens) > 0 || loopbackListenAddr(cfg.HTTPAddr) {
		return nil
	}
	return &ConfigError{Var: "OUTBOX_HTTP_ADDR", Message: fmt.Sprintf(
		"%q is not a loopback address, and OUTBOX_API_TOKENS is empty: without tokens serve answers only on loopback "+
			"(such as 127.0.0.1:8080); set OUTBOX_API_TOKENS to token:namespace pairs to listen on %s", cfg.HTTPAddr, cfg.HTTPAddr)}
}

// checkUIAuth applies River UI's version of the same rule: without
// OUTBOX_UI_USER and OUTBOX_UI_PASSWORD, serve listens only on loopback. One
// of the two without the other is a mistake.
func checkUIAuth(cfg *Config) error {
	switch {
	case cfg.UIUser != "" && cfg.UIPassword == "":
		return &ConfigError{Var: "OUTBOX_UI_PASSWORD", Message: "not set; expected " + fieldTag("UIPassword", "expect") + ", required when OUTBOX_UI_USER is set"}
	case cfg.UIUser == "" && cfg.UIPassword != "":
		return &ConfigError{Var: "OUTBOX_UI_USER", Message: "not set; expected " + fieldTag("UIUser", "expect") + ", required when OUTBOX_UI_PASSWORD is set"}
	case cfg.UIUser == "" && !loopbackListenAddr(cfg.HTTPAddr):
		return &ConfigError{Var: "OUTBOX_HTTP_ADDR", Message: fmt.Sprintf(
			"%q is not a loopback address, and OUTBOX_UI_USER and OUTBOX_UI_PASSWORD are empty: without them River UI is served only on loopback "+
				"(such as 127.0.0.1:8080); set both to listen on %s", cfg.HTTPAddr, cfg.HTTPAddr)}
	}
	return nil
}

// loopbackListenAddr reports whether a listen address binds loopback only:
// localhost, 127.0.0.0/8 or ::1. An empty host (":8080") binds every
// interface.
func loopbackListenAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && host != "" && httpapi.IsLoopbackAddr(addr)
}

package cli

import (
	"fmt"
	"net"
	"strings"

	"github.com/outbox-dev/outbox/internal/access"
)

// checkAPIAuth refuses, in one line, a configuration that would expose the
// API (docs/operations.md, "Security"): without tokens serve refuses to start
// unless OUTBOX_ALLOW_NO_AUTH=true says so, and then answers on loopback
// only, as namespace default with the operator role. Placeholder
// credentials (the compose file's examples) are refused off loopback.
func checkAPIAuth(cfg *Config) error {
	loopback := loopbackListenAddr(cfg.HTTPAddr)
	if len(cfg.Tokens()) == 0 {
		switch {
		case !cfg.AllowNoAuth:
			return &ConfigError{Var: "OUTBOX_API_TOKENS", Message: "not set: serve needs API tokens, such as " +
				"OUTBOX_API_TOKENS=<a token of 16 or more characters>:<namespace>[:agent|operator|reader] " +
				"(or OUTBOX_API_TOKENS_FILE); to serve without them on this machine only, for development, set OUTBOX_ALLOW_NO_AUTH=true"}
		case !loopback:
			return &ConfigError{Var: "OUTBOX_HTTP_ADDR", Message: fmt.Sprintf(
				"%q is not a loopback address, and OUTBOX_API_TOKENS is empty: without tokens serve answers only on loopback "+
					"(such as 127.0.0.1:8080); set OUTBOX_API_TOKENS to token:namespace[:role] entries to listen on %s", cfg.HTTPAddr, cfg.HTTPAddr)}
		}
		return nil
	}
	if !loopback {
		for _, t := range cfg.Tokens() {
			if placeholder(t.Secret()) {
				return &ConfigError{Var: "OUTBOX_API_TOKENS", Message: "holds a placeholder token (the compose file's example, " + t.Fingerprint() +
					"), and serve listens beyond loopback: set tokens of your own"}
			}
		}
	}
	if !loopbackListenAddr(uiAddr(cfg)) {
		if cfg.UIPassword != "" && placeholder(cfg.UIPassword) {
			return &ConfigError{Var: "OUTBOX_UI_PASSWORD", Message: "is a placeholder (the compose file's example), and serve listens beyond loopback: set a password of your own"}
		}
	}
	return nil
}

// placeholder reports whether a secret is one of the examples the compose
// file and the docs show, which anyone can read.
func placeholder(secret string) bool {
	s := strings.ToLower(secret)
	return strings.Contains(s, "dev-token") || strings.Contains(s, "change-me")
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
	case cfg.UIPassword != "" && len(cfg.UIPassword) < access.TokenMinLength:
		// The River UI user acts as an operator in the console (resolve,
		// approve, bulk cancel): its password is held to the tokens'
		// length, and failed tries are slowed per address.
		return &ConfigError{Var: "OUTBOX_UI_PASSWORD", Message: fmt.Sprintf("is shorter than %d characters, the API tokens' minimum: the River UI user is an operator", access.TokenMinLength)}
	case cfg.UIUser == "" && !loopbackListenAddr(uiAddr(cfg)):
		variable := "OUTBOX_HTTP_ADDR"
		if cfg.AdminAddr != "" {
			variable = "OUTBOX_ADMIN_ADDR"
		}
		return &ConfigError{Var: variable, Message: fmt.Sprintf(
			"%q is not a loopback address, and OUTBOX_UI_USER and OUTBOX_UI_PASSWORD are empty: without them River UI is served only on loopback "+
				"(such as 127.0.0.1:8080); set both to listen on %s", uiAddr(cfg), uiAddr(cfg))}
	}
	return nil
}

// uiAddr is where River UI is served: the admin listener when there is one.
func uiAddr(cfg *Config) string {
	if cfg.AdminAddr != "" {
		return cfg.AdminAddr
	}
	return cfg.HTTPAddr
}

// loopbackListenAddr reports whether a listen address binds loopback only:
// localhost, 127.0.0.0/8 or ::1. An empty host (":8080") binds every
// interface.
func loopbackListenAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && host != "" && access.IsLoopbackAddr(addr)
}

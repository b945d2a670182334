// Command outboxd runs the outbox: the dispatcher and its HTTP server
// (serve), the migrations, and the operators' commands. See package
// internal/cli for the commands themselves.
package main

import (
	"context"
	"os"

	"github.com/outbox-dev/outbox/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

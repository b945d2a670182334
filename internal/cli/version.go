package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is outboxd's version. Release builds set it with
// -ldflags "-X github.com/outbox-dev/outbox/internal/cli.Version=v1.2.3";
// otherwise it is the main module's version when built with go install, or
// "dev".
var Version = "dev"

var cmdVersion = &command{
	name: "version",
	doc:  "Prints outboxd's version and the Go version it was built with.",
}

func (a *app) version(_ context.Context, args []string) error {
	if _, err := a.parse(cmdVersion, newFlagSet(cmdVersion), args, 0, 0); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "outboxd %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

func version() string {
	if Version != "dev" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return Version
}

// Package testtools finds the third-party servers that tests run the effects
// against (stripe-mock, mailpit), as scripts/install-test-tools.sh installs
// them.
package testtools

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Find returns the path of the binary name: $envVar, else PATH, else
// $GOPATH/bin. Without it the test is skipped, except under CI (CI set),
// where it must be there.
func Find(tb testing.TB, name, envVar string) string {
	tb.Helper()
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	if p := filepath.Join(gopath, "bin", name); fileExists(p) {
		return p
	}
	msg := fmt.Sprintf("%s not found (set %s, or put it on PATH): run scripts/install-test-tools.sh", name, envVar)
	if os.Getenv("CI") != "" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

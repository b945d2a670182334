// Package testtools finds the third-party servers that tests run the effects
// against (stripe-mock, mailpit), as scripts/install-test-tools.sh installs
// them.
package testtools

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// StartStripeMock runs stripe-mock (Stripe's own mock of its API, which
// checks every request against Stripe's OpenAPI specification) on loopback
// ports of its choosing, stopped when the test ends, and returns its HTTP
// URL. Without stripe-mock the test is skipped, as Find says.
func StartStripeMock(t testing.TB) string {
	t.Helper()
	bin := Find(t, "stripe-mock", "STRIPE_MOCK_BIN")
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("stripe-mock: %v", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting stripe-mock: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("stripe-mock did not start listening")
		return ""
	}
}

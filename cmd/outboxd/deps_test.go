package main

import (
	"bufio"
	"bytes"
	"errors"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// module is the module's import path, the prefix of the packages the test
// inspects; the standard library and third-party packages are not ours to
// judge.
const module = "github.com/outbox-dev/outbox"

// testOnlyPrefixes are the directories whose packages exist for tests.
var testOnlyPrefixes = []string{
	module + "/integration",
	module + "/internal/testdb",
	module + "/internal/testfactory",
	module + "/internal/testrun",
	module + "/internal/testtools",
	module + "/outboxtest",
}

// testOnlyDoc matches what a package's doc says when the package is for
// tests only, wherever it lives.
var testOnlyDoc = regexp.MustCompile(`(?i)\btest[-\s]only\b|\bnot\s+part\s+of\s+the\s+product\b|\btest\s+fixture\b`)

// TestNoTestCodeInBinary lists what outboxd links (go list -deps) and fails
// on any package of the module that exists for tests: one under a test
// directory, or one whose package doc says it is test-only. What outboxd
// runs on purpose instead of a provider lives under internal/sandbox and
// says so.
func TestNoTestCodeInBinary(t *testing.T) {
	t.Parallel()

	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \" \"}}", ".").Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	var ours int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, rest, _ := strings.Cut(sc.Text(), "\t")
		dir, files, _ := strings.Cut(rest, "\t")
		if path != module && !strings.HasPrefix(path, module+"/") {
			continue
		}
		ours++
		if reason := testOnly(t, path, dir, strings.Fields(files)); reason != "" {
			t.Errorf("outboxd links %s, which is test-only: %s", path, reason)
		}
	}
	if ours < 10 {
		// The listing is wrong rather than the binary small: outboxd
		// links dozens of the module's packages.
		t.Fatalf("go list -deps found only %d packages of %s:\n%s", ours, module, out)
	}
}

// testOnly says why the package at path is test-only, or "" when it is not.
func testOnly(t *testing.T, path, dir string, files []string) string {
	t.Helper()
	for _, p := range testOnlyPrefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return "it is under " + strings.TrimPrefix(p, module+"/")
		}
	}
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatalf("error parsing %s: %v", f, err)
		}
		if file.Doc == nil {
			continue
		}
		if m := testOnlyDoc.FindString(file.Doc.Text()); m != "" {
			return "its package doc (" + f + ") says " + strconv.Quote(m)
		}
	}
	return ""
}

// TestTestOnlyDoc shows which package docs count as test-only: a fixture's
// or a stand-in's wording, wrapped over lines as doc comments are, and not
// the sandbox's own.
func TestTestOnlyDoc(t *testing.T) {
	t.Parallel()

	for _, doc := range []string{
		"Package noop is ... a fixture of the sandbox, the demo, the bench and the tests, not part of the\nproduct.",
		"Package mcpupstream is an MCP server of the project's own, a test fixture\nof MCP upstreams.",
		"Package gitlabapi is a stand-in: it is\ntest-only, never part of outboxd.",
		"Package x is test only.",
	} {
		if !testOnlyDoc.MatchString(doc) {
			t.Errorf("testOnlyDoc does not match %q", doc)
		}
	}
	for _, doc := range []string{
		"Package sandbox runs local stand-ins. The stand-ins are for development and tests.",
		"Package noop is the sandbox's effect, a stand-in that outboxd runs on purpose; tests use it too.",
	} {
		if testOnlyDoc.MatchString(doc) {
			t.Errorf("testOnlyDoc matches %q", doc)
		}
	}
}

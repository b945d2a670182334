package integration

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The integration tests come in three tiers, so that a change can be
// checked by the tier it touches (make test-core, test-faults,
// test-ecosystem) while go test ./... and make test still run them all:
//
//   - core: outboxd processes on the test database, killed, restarted and
//     loaded; what every change should pass.
//   - faults: PostgreSQL's own faults, on clusters of their own (failover,
//     a full disk, a restore, the rolling upgrade from the previous
//     release) or behind a proxy that drops replies.
//   - ecosystem: what outbox meets outside Go: a browser, the npm and
//     Python examples, a real third-party MCP server, docker compose. Each
//     test skips when its tool is missing (and fails under CI).
//
// OUTBOX_TEST_TIERS names the tiers to run, comma-separated; unset, all.
const envTiers = "OUTBOX_TEST_TIERS"

const (
	tierCore      = "core"
	tierFaults    = "faults"
	tierEcosystem = "ecosystem"
)

// tiers names each test's tier. TestTiers keeps it whole: a test missing
// from it fails there.
var tiers = map[string]string{
	"TestApprovalSurvivesKill":                   tierCore,
	"TestCancelRefusedAfterKillMidCharge":        tierCore,
	"TestCommandLine":                            tierCore,
	"TestConcurrentMigrateUp":                    tierCore,
	"TestDeclaredEffectsChaos":                   tierCore,
	"TestEffectsChargeSeedFailureAndDecline":     tierCore,
	"TestEffectsKillServe":                       tierCore,
	"TestEffectsProviderFaults":                  tierCore,
	"TestEffectsWebhookAtMostOnce":               tierCore,
	"TestHistoryModel":                           tierCore,
	"TestKillServe":                              tierCore,
	"TestRecoveryTime":                           tierCore,
	"TestReplicaWithoutAnEffectLeavesItsIntents": tierCore,
	"TestReplicasWithRandomKills":                tierCore,
	"TestReplicasWithRandomKillsJobPerIntent":    tierCore,
	"TestRiverUICancelAndDeleteAreRepaired":      tierCore,
	"TestSIGTERMLetsTheAttemptInFlightFinish":    tierCore,
	"TestSoak":                               tierCore,
	"TestStaleAttemptDoesNotStrandItsIntent": tierCore,
	"TestStaleSendIsLookedUpBeforeResend":    tierCore,
	"TestTracesExported":                     tierCore,
	"TestUnknownSurvivesPruning":             tierCore,
	"TestUpstreams":                          tierCore,
	"TestUpstreamsHTTP":                      tierCore,
	"TestMCPTasksServe":                      tierCore,
	"TestUpstreamTasks":                      tierCore,
	"TestUpstreamLateSend":                   tierCore,
	"TestUpstreamRollout":                    tierCore,
	"TestExhaustion":                         tierFaults,
	"TestFailoverAsync":                      tierFaults,
	"TestFailoverSync":                       tierFaults,
	"TestHistory":                            tierFaults,
	"TestLostAcks":                           tierFaults,
	"TestPostgresFaults":                     tierFaults,
	"TestRestoreFromBackup":                  tierFaults,
	"TestRollingUpgrade":                     tierFaults,
	"TestPatroniFailover":                    tierFaults,
	"TestPgBouncer":                          tierFaults,
	"TestRestoreFromPgBackRest":              tierFaults,
	"TestCompose":                            tierEcosystem,
	"TestComposeEnvironment":                 tierEcosystem,
	"TestComposeVersions":                    tierEcosystem,
	"TestConsoleInABrowser":                  tierEcosystem,
	"TestMCPHostApprovalTypeScriptSDK":       tierEcosystem,
	"TestExamplePython":                      tierEcosystem,
	"TestExampleTypeScriptUpstream":          tierEcosystem,
	"TestExamplesDeclaredEffect":             tierEcosystem,
	"TestExamplesTypeScript":                 tierEcosystem,
	"TestRiverUIInABrowser":                  tierEcosystem,
	"TestUpstreamGitLab":                     tierEcosystem,
	"TestTiers":                              tierCore,
}

// parallel is the package's -parallel when the command line gives none
// (testdb.RunParallel), rather than go test's GOMAXPROCS (2 in CI): most of
// these tests wait on outboxd processes, clusters and timeouts, not on the
// CPU. Six at a time hold up to about 150 connections at once, each serve
// with pools of its own.
const parallel = 6

// setTestFlags applies OUTBOX_TEST_TIERS as a -run of the chosen tiers'
// tests, unless the command line set -run itself.
func setTestFlags() error {
	flag.Parse()
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })

	value := os.Getenv(envTiers)
	if value == "" || given["test.run"] {
		return nil
	}
	chosen := map[string]bool{}
	for name := range strings.SplitSeq(value, ",") {
		name = strings.TrimSpace(name)
		if name != tierCore && name != tierFaults && name != tierEcosystem {
			return fmt.Errorf("%s=%q: %q is not a tier (core, faults, ecosystem)", envTiers, value, name)
		}
		chosen[name] = true
	}
	var names []string
	for _, test := range slices.Sorted(maps.Keys(tiers)) {
		if chosen[tiers[test]] {
			names = append(names, regexp.QuoteMeta(test))
		}
	}
	return flag.Set("test.run", "^("+strings.Join(names, "|")+")$")
}

// TestTiers: every test of the package is in exactly one tier, and the
// tiers name no test that is gone.
func TestTiers(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	found := map[string]bool{}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
				found[fn.Name.Name] = true
			}
		}
	}
	for name := range found {
		require.Contains(t, tiers, name, "%s has no tier: add it to tiers in tier_test.go", name)
	}
	for name := range tiers {
		require.True(t, found[name], "tiers names %s, which no file declares", name)
	}
}

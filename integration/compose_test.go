package integration

import (
	"bytes"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/sethvargo/go-envconfig"
	"github.com/stretchr/testify/require"

	outboxcli "github.com/outbox-dev/outbox/internal/cli"
)

const repoRoot = ".."

// composeTokens and composeUIPassword are the credentials the tests give
// compose, which has no defaults of its own.
const (
	composeTokens     = "4f1c2a9e8b7d6c5a:default"
	composeUIPassword = "a-password-of-our-own"
)

// loadCompose loads docker-compose.yml as docker compose would, with env (and
// the credentials above, unless env sets them) as the shell's variables.
func loadCompose(t *testing.T, env ...string) *types.Project {
	t.Helper()
	vars := map[string]string{"OUTBOX_API_TOKENS": composeTokens, "OUTBOX_UI_PASSWORD": composeUIPassword}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var list []string
	for k, v := range vars {
		list = append(list, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(repoRoot, "docker-compose.yml")},
		cli.WithWorkingDirectory(repoRoot), cli.WithEnv(list), cli.WithInterpolation(true))
	require.NoError(t, err)
	project, err := opts.LoadProject(t.Context())
	require.NoError(t, err)
	return project
}

// configVars are the variables outboxd reads (README, "Operations"), from its
// Config's tags.
func configVars() []string {
	var vars []string
	typ := reflect.TypeFor[outboxcli.Config]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("env"), ",")
		vars = append(vars, name)
	}
	return vars
}

func serviceEnv(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

func TestCompose(t *testing.T) {
	t.Parallel()

	p := loadCompose(t)
	require.Equal(t, "outbox", p.Name)
	require.ElementsMatch(t, []string{"postgres", "migrate", "outboxd", "stripe-mock", "mailpit"}, p.ServiceNames())

	postgres := p.Services["postgres"]
	require.NotNil(t, postgres.HealthCheck)
	require.Equal(t, "pg_isready", postgres.HealthCheck.Test[1])
	pgEnv := serviceEnv(postgres)

	migrate, serve := p.Services["migrate"], p.Services["outboxd"]
	require.Equal(t, types.ShellCommand{"migrate", "up"}, migrate.Command)
	require.Equal(t, types.ShellCommand{"serve"}, serve.Command)
	require.Equal(t, "no", migrate.Restart)
	require.Equal(t, types.ServiceConditionHealthy, migrate.DependsOn["postgres"].Condition)
	require.Equal(t, types.ServiceConditionCompletedSuccessfully, serve.DependsOn["migrate"].Condition)
	require.Equal(t, types.ServiceConditionHealthy, serve.DependsOn["mailpit"].Condition)
	require.Contains(t, serve.DependsOn, "stripe-mock")
	for _, s := range []types.ServiceConfig{migrate, serve} {
		require.NotNil(t, s.Build, s.Name)
		require.Equal(t, "Dockerfile", s.Build.Dockerfile, s.Name)
	}
	require.NotNil(t, p.Services["mailpit"].HealthCheck)

	// Every variable given to outboxd is one it reads.
	known := configVars()
	for _, s := range []types.ServiceConfig{migrate, serve} {
		for name := range s.Environment {
			require.Contains(t, known, name, "%s: %s is not an outboxd variable", s.Name, name)
		}
	}

	// Wired to the other services.
	serveEnv := serviceEnv(serve)
	require.Equal(t, serviceEnv(migrate)["DATABASE_URL"], serveEnv["DATABASE_URL"])
	db, err := url.Parse(serveEnv["DATABASE_URL"])
	require.NoError(t, err)
	require.Equal(t, "postgres:5432", db.Host)
	require.Equal(t, pgEnv["POSTGRES_USER"], db.User.Username())
	password, _ := db.User.Password()
	require.Equal(t, pgEnv["POSTGRES_PASSWORD"], password)
	require.Equal(t, "/"+pgEnv["POSTGRES_DB"], db.Path)
	require.Equal(t, "http://stripe-mock:12111", serveEnv["OUTBOX_STRIPE_URL"])
	require.NotEmpty(t, serveEnv["OUTBOX_STRIPE_KEY"])
	require.Equal(t, "mailpit:1025", serveEnv["OUTBOX_SMTP_ADDR"])
	require.Equal(t, "none", serveEnv["OUTBOX_SMTP_TLS"])

	// serve listens on every interface of its container, so it needs API
	// tokens and River UI's credentials; the port is published on the
	// host's loopback only, and the health check asks /readyz there.
	_, port, err := net.SplitHostPort(serveEnv["OUTBOX_HTTP_ADDR"])
	require.NoError(t, err)
	require.Equal(t, composeTokens, serveEnv["OUTBOX_API_TOKENS"])
	require.NotEmpty(t, serveEnv["OUTBOX_UI_USER"])
	require.NotEmpty(t, serveEnv["OUTBOX_UI_PASSWORD"])
	require.Len(t, serve.Ports, 1)
	require.Equal(t, "127.0.0.1", serve.Ports[0].HostIP)
	require.Equal(t, port, serve.Ports[0].Published)
	require.NotNil(t, serve.HealthCheck)
	require.Contains(t, serve.HealthCheck.Test, "http://127.0.0.1:"+port+"/readyz")

	// outboxd accepts the configuration: with the database swapped for an
	// address that refuses at once, the command gets past reading it and
	// fails connecting.
	vars := serviceEnv(serve)
	vars["DATABASE_URL"] = "postgres://outbox@127.0.0.1:1/outbox?sslmode=disable&connect_timeout=2"
	var stdout, stderr bytes.Buffer
	code := outboxcli.Run(t.Context(), []string{"intents", "list"}, &outboxcli.RunOpts{
		Lookuper: envconfig.MapLookuper(vars), Stderr: &stderr, Stdout: &stdout,
	})
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "outboxd: error connecting to postgres://outbox@127.0.0.1:1/")
}

// TestComposeEnvironment checks that the shell's variables reach serve, and
// that compose refuses to start without credentials: it has no defaults
// anyone could read.
func TestComposeEnvironment(t *testing.T) {
	t.Parallel()

	for _, env := range [][]string{nil, {"OUTBOX_UI_PASSWORD=long-secret"}, {"OUTBOX_API_TOKENS=" + composeTokens}} {
		opts, err := cli.NewProjectOptions([]string{filepath.Join(repoRoot, "docker-compose.yml")},
			cli.WithWorkingDirectory(repoRoot), cli.WithEnv(env), cli.WithInterpolation(true))
		require.NoError(t, err)
		_, err = opts.LoadProject(t.Context())
		require.Error(t, err, env)
		require.Regexp(t, "OUTBOX_(API_TOKENS|UI_PASSWORD)", err.Error())
	}

	p := loadCompose(t, "OUTBOX_API_TOKENS=prod-token-0123456789:shop", "OUTBOX_UI_USER=ops", "OUTBOX_UI_PASSWORD=long-secret")
	serveEnv := serviceEnv(p.Services["outboxd"])
	require.Equal(t, "prod-token-0123456789:shop", serveEnv["OUTBOX_API_TOKENS"])
	require.Equal(t, "ops", serveEnv["OUTBOX_UI_USER"])
	require.Equal(t, "long-secret", serveEnv["OUTBOX_UI_PASSWORD"])
}

// TestComposeVersions checks the stand-ins' images against the versions the
// tests run (scripts/install-test-tools.sh), and the Dockerfile's Go
// against go.mod's.
func TestComposeVersions(t *testing.T) {
	t.Parallel()

	script, err := os.ReadFile(filepath.Join(repoRoot, "scripts", "install-test-tools.sh"))
	require.NoError(t, err)
	p := loadCompose(t)
	for service, variable := range map[string]string{"stripe-mock": "STRIPE_MOCK_VERSION", "mailpit": "MAILPIT_VERSION"} {
		m := regexp.MustCompile(`(?m)^` + variable + `=(\S+)$`).FindSubmatch(script)
		require.NotNil(t, m, variable)
		image := p.Services[service].Image
		require.True(t, strings.HasSuffix(image, ":"+string(m[1])), "%s runs %s, the tests %s", service, image, m[1])
	}

	goMod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	require.NotNil(t, m, "go.mod's go directive")
	goVersion := string(m[1])
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	require.Contains(t, string(dockerfile), "FROM golang:"+goVersion+"-")
	require.Contains(t, string(dockerfile), "./cmd/outboxd")
	require.True(t, slices.ContainsFunc(strings.Split(string(dockerfile), "\n"), func(line string) bool {
		return strings.HasPrefix(line, "ENTRYPOINT [") && strings.Contains(line, "outboxd")
	}))
}

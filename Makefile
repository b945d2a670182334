# Targets match the README and .ci/run.

DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable

.PHONY: demo run test test-core test-faults test-ecosystem test-clients lint lint-go lint-ts bench bench-mcp soak ci

# The first run: the story outbox exists for, told with real calls, then
# River UI and /metrics until Ctrl-C. A throwaway PostgreSQL unless
# DATABASE_URL is set in the environment.
demo:
	go run ./cmd/outboxd demo

# The main job: migrate, then serve with the sandbox effects, against
# DATABASE_URL (the machine's PostgreSQL by default), without API tokens, on
# loopback only (OUTBOX_ALLOW_NO_AUTH): for development.
run:
	DATABASE_URL='$(DATABASE_URL)' OUTBOX_SANDBOX=true OUTBOX_AUTO_MIGRATE=true OUTBOX_ALLOW_NO_AUTH=true go run ./cmd/outboxd serve

# The tests. They use TEST_DATABASE_URL when set, and otherwise start a
# throwaway PostgreSQL cluster from the local binaries.
test:
	go test ./...

# The integration package's tiers (integration/tier_test.go), through
# OUTBOX_TEST_TIERS; make test runs all three. core: every package's tests
# and integration's outboxd processes on the test database, what every
# change should pass. faults: PostgreSQL failover, a full disk, a restore,
# the rolling upgrade, on clusters of their own. ecosystem: a browser, the
# npm and Python examples, GitLab's MCP server, compose (each skips without
# its tool, outside CI).
test-core:
	OUTBOX_TEST_TIERS=core go test ./...

test-faults:
	OUTBOX_TEST_TIERS=faults go test ./integration

test-ecosystem:
	OUTBOX_TEST_TIERS=ecosystem go test ./integration

# The client packages (clients/python, clients/typescript): their tests
# against a database of their own and a real serve each, then each installed
# as its README says and its example run. Needs Debian's python3-psycopg,
# python3-sqlalchemy, python3-requests and python3-pytest, and node.
test-clients:
	clients/test.sh

# golangci-lint (pinned, installed by scripts/install-test-tools.sh into
# GOPATH/bin): gofmt and gci, go vet, staticcheck, errcheck, errorlint,
# gosec, misspell, revive and unparam, as .golangci.yml configures them.
GOLANGCI_LINT ?= $(shell command -v golangci-lint 2>/dev/null || echo $$(go env GOPATH)/bin/golangci-lint)

lint: lint-go lint-ts

# The Go half of lint, which needs no npm package (.ci/run runs it while
# the npm packages install).
lint-go:
	@test -x "$(GOLANGCI_LINT)" || { echo "golangci-lint is missing: scripts/install-test-tools.sh installs it"; exit 1; }
	$(GOLANGCI_LINT) run ./...

# The TypeScript examples, type-checked as tsconfig.json says (strict): tsx,
# which runs them, does not check types. --no: the local typescript or
# nothing, never the unrelated package npm calls tsc; --: npx would take -p
# for its own --package.
lint-ts:
	@if [ -d examples/typescript/node_modules ]; then cd examples/typescript && npx --no -- tsc --noEmit --project .; \
	else echo "examples/typescript not type-checked: npm ci there first"; fi

# Plain River against outbox, side by side, on DATABASE_URL.
bench:
	TEST_DATABASE_URL='$(DATABASE_URL)' go test ./internal/bench -run '^$$' -bench Compare -benchtime 1x -timeout 30m

# The mcp lane: tool calls through /mcp with the tasks extension (create,
# re-issue, poll to the end) against the Go library, in the same run.
bench-mcp:
	TEST_DATABASE_URL='$(DATABASE_URL)' go test ./internal/mcpserver -run '^$$' -bench LaneMCP -benchtime 1x -count 3

# Not in CI: two serve replicas for 30 minutes at half the measured maximum
# rate, a fault every minute, samples every 10 s (SOAK_OUT names the CSV).
# DATABASE_URL must be TCP: the lost-ack fault proxies serve's connections.
soak:
	TEST_DATABASE_URL='$(DATABASE_URL)' go test ./integration -run TestSoak -soak.duration 30m -timeout 45m -count=1 -v

ci: lint test test-clients

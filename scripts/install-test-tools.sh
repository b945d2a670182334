#!/usr/bin/env bash
# Installs the third-party servers that `go test ./...` runs the effects
# against, from the Go module proxy at pinned versions:
#
#   stripe-mock  Stripe's own mock API server, which validates every request
#                against Stripe's OpenAPI specification (effects/charge).
#   mailpit      a real SMTP server with an HTTP API to read what it received
#                (effects/email).
#   golangci-lint  the linter make lint runs (.golangci.yml).
#
# Usage: scripts/install-test-tools.sh [DIR]
#
# DIR defaults to $(go env GOPATH)/bin. The tests find the binaries on PATH,
# or through STRIPE_MOCK_BIN and MAILPIT_BIN. A binary already built at the
# pinned version is kept, so a second run costs nothing.
set -euo pipefail

STRIPE_MOCK_VERSION=v0.203.0
MAILPIT_VERSION=v1.33.1
GOLANGCI_LINT_VERSION=v2.15.0

dir=${1:-$(go env GOPATH)/bin}
mkdir -p "$dir"

# The tools' own go.mod files decide their dependencies; GOTOOLCHAIN=local
# makes a version needing a newer Go fail here instead of fetching a
# toolchain.
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

install() {
	local name=$1 module=$2 version=$3 pkg=${4:-$2}
	if [ -x "$dir/$name" ] && go version -m "$dir/$name" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+$module[[:space:]]+$version([[:space:]]|$)"; then
		echo "$name $version already in $dir"
		return
	fi
	echo "installing $name $version into $dir"
	GOBIN="$dir" go install "$pkg@$version"
}

install stripe-mock github.com/stripe/stripe-mock "$STRIPE_MOCK_VERSION"
install mailpit github.com/axllent/mailpit "$MAILPIT_VERSION"
# The linter of make lint (.golangci.yml): building it takes a few minutes
# the first time, nothing after.
install golangci-lint github.com/golangci/golangci-lint/v2 "$GOLANGCI_LINT_VERSION" github.com/golangci/golangci-lint/v2/cmd/golangci-lint

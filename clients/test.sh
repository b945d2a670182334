#!/usr/bin/env bash
# The client packages' tests (make test-clients; .ci/run): Python's with
# pytest, TypeScript's with vitest, each against a database of its own on
# OUTBOX_TEST_PG and a real outboxd serve; then the newcomer's check: each
# package installed as its README says, and its example run against a serve.
# OUTBOXD names a built outboxd (else one is built here, once); PYTHON a
# Python with psycopg, SQLAlchemy, requests and pytest (else Debian's).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export OUTBOX_TEST_PG="${OUTBOX_TEST_PG:-postgresql://postgres@127.0.0.1:5432/postgres}"
tmp=$(mktemp -d)
serve_pid=
db=
cleanup() {
	if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
	if [ -n "$db" ]; then psql "$OUTBOX_TEST_PG" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ -z "${OUTBOXD:-}" ]; then
	OUTBOXD=$tmp/outboxd
	go build -o "$OUTBOXD" ./cmd/outboxd
fi
export OUTBOXD
if [ -z "${PYTHON:-}" ]; then
	PYTHON=python3
	[ -x /usr/bin/python3 ] && PYTHON=/usr/bin/python3
fi

echo "== clients/python: pytest"
(cd clients/python && "$PYTHON" -m pytest -q -p no:cacheprovider)

echo "== clients/typescript: build, types, vitest"
(
	cd clients/typescript
	[ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error
	npm run --silent build
	npm run --silent typecheck
	npm run --silent check-generated >/dev/null
	npx --no -- vitest run
)

echo "== newcomer: install each package as its README says, run its example"
db=outbox_clients_newcomer_$$
psql "$OUTBOX_TEST_PG" -qc "CREATE DATABASE $db"
database_url=$("$PYTHON" -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$OUTBOX_TEST_PG" "$db")
DATABASE_URL=$database_url "$OUTBOXD" migrate up >/dev/null
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DATABASE_URL=$database_url OUTBOX_SANDBOX=true OUTBOX_ALLOW_NO_AUTH=true OUTBOX_HTTP_ADDR=127.0.0.1:$port \
	"$OUTBOXD" serve >"$tmp/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 100); do
	curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
	kill -0 "$serve_pid" 2>/dev/null || { cat "$tmp/serve.log"; exit 1; }
	sleep 0.1
done
export OUTBOX_URL=http://127.0.0.1:$port EXAMPLE_RUN=newcomer-$$

# Python: pip install, into a directory of its own (CI installs system-wide:
# see clients/python/README.md), then the example from outside the tree.
"$PYTHON" -m pip install -q --no-build-isolation --no-deps --target "$tmp/site" ./clients/python 2>&1 | grep -v "^WARNING: Running pip as" || true
rm -rf clients/python/build clients/python/src/*.egg-info
(cd "$tmp" && PYTHONPATH=$tmp/site "$PYTHON" -c 'import outbox_client, sys; assert outbox_client.__file__.startswith(sys.argv[1]), outbox_client.__file__' "$tmp/site")
out=$(cd "$tmp" && PYTHONPATH=$tmp/site "$PYTHON" "$root/examples/python/idempotent_tool.py")
echo "$out"
echo "$out" | "$PYTHON" -c 'import json, sys; o = json.loads(sys.stdin.read().splitlines()[-1]); assert o["duplicates"] == [False, True] and len(set(o["intent_ids"])) == 1 and o["state"] == "succeeded", o'

# TypeScript: the examples install the built package (npm ci there copies
# it in: install-links), then the tool helpers' example.
if [ -d examples/typescript/node_modules ]; then
	out=$(cd examples/typescript && npx --no -- tsx tools.ts)
	echo "$out"
	echo "$out" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const o=JSON.parse(s.trim().split("\n").pop());for(const [n,f] of Object.entries(o.frameworks)){if(new Set(f.intent_ids).size!==1||f.duplicates.join()!=="false,true"||f.state!=="succeeded"){console.error(n,f);process.exit(1)}}})'
else
	echo "examples/typescript/node_modules missing: npm ci there to run tools.ts (.ci/run does)"
	[ -z "${CI:-}" ] || exit 1
fi
echo "== clients: ok"

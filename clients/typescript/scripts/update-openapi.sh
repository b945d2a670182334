#!/usr/bin/env bash
# Takes the OpenAPI document from a running outboxd serve (OUTBOX_URL, default
# http://127.0.0.1:8080; /v1/openapi.json needs no token) into openapi.json,
# and regenerates src/openapi.ts from it. Run it after changing
# internal/httpapi/openapi.yaml; the tests (here and Go's
# TestOpenAPISnapshotOfTypeScriptClient) fail until then.
set -euo pipefail
cd "$(dirname "$0")/.."
curl -fsS "${OUTBOX_URL:-http://127.0.0.1:8080}/v1/openapi.json" |
	node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.stdout.write(JSON.stringify(JSON.parse(s),null,2)+"\n"))' >openapi.json.new
mv openapi.json.new openapi.json
npx --no -- openapi-typescript openapi.json -o src/openapi.ts

#!/usr/bin/env bash
# Fuzzes queue-api's HTTP API from its own OpenAPI document with schemathesis: a
# valkey-server (the module, then a bare server with the Lua library) and a release
# queue-api on free loopback ports, then every operation with generated valid and
# invalid requests, including stateful sequences (enter, then status/stream/leave of
# the userId given). Fails on any 5xx, any response that breaks the document (status
# code, content type, body schema, headers), or an invalid request accepted.
# Not checked: that every schema-valid request is accepted (positive_data_acceptance):
# the document cannot say that a nickname is at most 32 bytes (not characters) or
# which proof of work is valid, so such refusals are by design. scripts/fuzz-api.toml
# adds 413 to the statuses that count as refusing invalid data (too many codes).
#   bash scripts/fuzz-api.sh             # EXAMPLES=50 per operation and phase
#   EXAMPLES=1000 bash scripts/fuzz-api.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
EXAMPLES=${EXAMPLES:-50}
command -v schemathesis >/dev/null 2>&1 || bash "$root/scripts/install-deps.sh" >/dev/null
[ -x "$root/target/release/queue-api" ] || (cd "$root" && cargo build --release --workspace --all-targets)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
status=0
for backend in module lua; do
  vport=$(port); aport=$(port)
  load=()
  [ "$backend" = module ] && load=(--loadmodule "$root/target/release/libvalkey_queue.so")
  valkey-server --port "$vport" --bind 127.0.0.1 --save '' --dir "$dir" "${load[@]}" >"$dir/valkey-$backend.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do valkey-cli -p "$vport" ping >/dev/null 2>&1 && break; sleep 0.1; done
  # queue-api loads the Lua library by itself on a bare server.
  "$root/target/release/queue-api" --valkey-url "redis://127.0.0.1:$vport/" --listen "127.0.0.1:$aport" \
    --admin-token fuzz-admin --rate-limit 0 >"$dir/api-$backend.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$aport/healthz" 2>/dev/null | grep -q '"up"' && break; sleep 0.1; done
  echo "== schemathesis against queue-api on the $backend backend ($EXAMPLES examples)"
  if ! schemathesis --config-file "$root/scripts/fuzz-api.toml" run "http://127.0.0.1:$aport/api/openapi.json" --checks all \
      --exclude-checks positive_data_acceptance -H "Authorization: Bearer fuzz-admin" \
      --max-examples "$EXAMPLES" --request-timeout 10 --no-color 2>&1 | grep -v "^ *$" | tail -40; then
    status=1
  fi
  if grep -qi panicked "$dir/api-$backend.log"; then echo "queue-api panicked:"; cat "$dir/api-$backend.log"; status=1; fi
done
if [ $status -eq 0 ]; then echo "fuzz-api: 2 passed, 0 failed"; else echo "fuzz-api: schemathesis found failures"; fi
exit $status

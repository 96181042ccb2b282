#!/usr/bin/env bash
# Runs the whole system locally on loopback: valkey-server with the module (or, with
# --lua, a bare server with the Lua library), queue-api, queue-manager, chat-server, and
# the gate in proxy mode in front of an example app (/checkout waits in queue "shop").
# Prints the URLs; Ctrl+C stops everything.
#   bash scripts/run-local.sh [--lua] [--soft-cap N]
# Ports: VALKEY_PORT (6390), API_PORT (8080), CHAT_PORT (8081), MANAGER_PORT (9091),
# GATE_PORT (8090), APP_PORT (3000).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
backend=module
soft_cap=5
while [ $# -gt 0 ]; do
  case "$1" in
    --lua) backend=lua ;;
    --soft-cap) soft_cap="$2"; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
VALKEY_PORT=${VALKEY_PORT:-6390}; API_PORT=${API_PORT:-8080}; CHAT_PORT=${CHAT_PORT:-8081}; MANAGER_PORT=${MANAGER_PORT:-9091}
GATE_PORT=${GATE_PORT:-8090}; APP_PORT=${APP_PORT:-3000}

bash "$root/scripts/install-deps.sh" >/dev/null
# The same build as scripts/test.sh, so running the tests afterwards rebuilds nothing
# (building only some packages would unify dependency features differently).
(cd "$root" && cargo build --release --workspace --all-targets)

run_dir=$(mktemp -d)
pids=()
stop() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$run_dir"
  echo "stopped"
}
trap stop INT TERM EXIT

load=()
[ "$backend" = module ] && load=(--loadmodule "$root/target/release/libvalkey_queue.so")
valkey-server --port "$VALKEY_PORT" --bind 127.0.0.1 --dir "$run_dir" --save '' --appendonly yes \
  --logfile "$run_dir/valkey.log" "${load[@]}" &
pids+=($!)
. "$root/bench/lib/valkey.sh"
wait_valkey "$VALKEY_PORT" || true
[ "$backend" = lua ] && bash "$root/scripts/load-lua.sh" -p "$VALKEY_PORT" >/dev/null
url="redis://127.0.0.1:$VALKEY_PORT/"
cli=(valkey-cli -p "$VALKEY_PORT")
for q in default shop; do
  if [ "$backend" = module ]; then "${cli[@]}" QUEUE.CONFIG "$q" SET soft_cap "$soft_cap" >/dev/null
  else "${cli[@]}" FCALL queue_config 1 "$q" SET soft_cap "$soft_cap" >/dev/null; fi
done

bin="$root/target/release"
"$bin/chat-server" --valkey-url "$url" --listen "127.0.0.1:$CHAT_PORT" & pids+=($!)
"$bin/queue-manager" --valkey-url "$url" --listen "127.0.0.1:$MANAGER_PORT" & pids+=($!)
# queue-api trusts loopback as a proxy (the gate in front of the room): fine while
# everything listens on loopback only; name your real proxies instead elsewhere.
"$bin/queue-api" --valkey-url "$url" --listen "127.0.0.1:$API_PORT" --chat-url "http://127.0.0.1:$CHAT_PORT/" \
  --admit-url shop=/gate/claim --admin-token "${ADMIN_TOKEN:-local-admin}" \
  --trusted-proxies 127.0.0.1 & pids+=($!)
# The gate in front of an example app (it answers with whom the gate said it serves):
# /checkout waits in queue "shop", the waiting room is served same-origin under /gate/room/.
"$bin/examples/gate-upstream" --listen "127.0.0.1:$APP_PORT" & pids+=($!)
"$bin/queue-gate" --valkey-url "$url" --listen "127.0.0.1:$GATE_PORT" --upstream "http://127.0.0.1:$APP_PORT" \
  --route /checkout=shop --queue-api "http://127.0.0.1:$API_PORT" & pids+=($!)

cat <<MSG

The waiting room is running ($backend backend, soft cap $soft_cap):
  waiting-room page   http://127.0.0.1:$API_PORT/
  chat page           http://127.0.0.1:$CHAT_PORT/   (the waiting room sends you there)
  an app behind the gate  http://127.0.0.1:$GATE_PORT/checkout   (queue shop; the gate's JWKS at /.well-known/jwks.json)
  metrics             http://127.0.0.1:$API_PORT/metrics  http://127.0.0.1:$MANAGER_PORT/metrics  http://127.0.0.1:$CHAT_PORT/metrics  http://127.0.0.1:$GATE_PORT/gate/metrics
  back office         curl -H 'Authorization: Bearer ${ADMIN_TOKEN:-local-admin}' http://127.0.0.1:$API_PORT/api/admin/queues/default
  valkey-cli          valkey-cli -p $VALKEY_PORT    (try QUEUE.INFO default)
  one person          $bin/queue-cli join --api http://127.0.0.1:$API_PORT --chat http://127.0.0.1:$CHAT_PORT --nickname alice
  a crowd             $bin/queue-cli swarm --api http://127.0.0.1:$API_PORT --chat http://127.0.0.1:$CHAT_PORT --users 300 --rate 50 --admin-token ${ADMIN_TOKEN:-local-admin}
Press Ctrl+C to stop everything.
MSG
wait -n "${pids[@]}" || true
echo "a process ended; stopping everything"

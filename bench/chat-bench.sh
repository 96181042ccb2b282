#!/usr/bin/env bash
# chat-server benchmark (a report, not a test): one chat-server, as many WebSocket
# sessions as asked (capped by the open-files limit), then
#  1. the chat-server's memory per open session (RSS before and after);
#  2. the time one MESSAGE_SEND takes to reach every session (through Valkey pub/sub
#     and back, as in production);
#  3. how long a SIGTERM takes to close every socket and end every lease.
#   bash bench/chat-bench.sh                 # SESSIONS=5000
#   SESSIONS=1000 bash bench/chat-bench.sh
# It starts its own valkey-server (with the module) and chat-server on free
# loopback ports and stops both on exit.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
SESSIONS=${SESSIONS:-5000}
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$SESSIONS" -gt "$(( $(ulimit -n) - 1000 ))" ]; then
  echo "open-files limit $(ulimit -n): SESSIONS $SESSIONS capped to $(( $(ulimit -n) - 1000 ))" >&2
  SESSIONS=$(( $(ulimit -n) - 1000 ))
fi
cd "$root"
[ -f target/release/libvalkey_queue.so ] || cargo build --release -q -p valkey-queue
cargo build --release -q -p chat-server --bins --examples
. "$root/bench/lib/valkey.sh"
trap 'kill ${vpid:-} ${cpid:-} 2>/dev/null; wait 2>/dev/null; rm -rf "${dir:-}"' EXIT
start_valkey; cport=$(port)
url="redis://127.0.0.1:$vport/"
# Sessions must not idle out while the bench runs.
RUST_LOG=warn "$root/target/release/chat-server" --valkey-url "$url" --listen "127.0.0.1:$cport" \
  --idle-timeout 1h --capacity "$SESSIONS" --max-sessions "$SESSIONS" --max-sessions-per-addr 0 & cpid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$cport/healthz" | grep -q '"room":"up"' && break; sleep 0.1; done

echo "chat-server benchmark ($(nproc) cores, valkey $(valkey-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2))"
"$root/target/release/examples/chat_bench" "ws://127.0.0.1:$cport" "$url" "$SESSIONS" "$cpid"

wait "$cpid" 2>/dev/null || true
cpid=

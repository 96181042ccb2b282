#!/usr/bin/env bash
# Benchmarks the module against the Lua library side by side on one server that has
# both loaded, and prints figures and module/library ratios (a report, not a test).
#   bench/backends-bench.sh                                   # defaults, a few minutes
#   ROUNDS=1 N=50000 MEM_USERS=50000 bench/backends-bench.sh  # quick run
# Environment: MODULE (default target/release/libvalkey_queue.so), ROUNDS, N,
# STATUS_USERS, CLAIMS, PROMOTE_REPS, MEM_USERS, VALKEY_SERVER, VALKEY_BENCHMARK.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
MODULE=${MODULE:-$root/target/release/libvalkey_queue.so}
[ -f "$MODULE" ] || { echo "missing $MODULE: cargo build --release -p valkey-queue" >&2; exit 2; }
python3 -c 'import valkey' 2>/dev/null || python3 -m pip install -q valkey
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
"${VALKEY_SERVER:-valkey-server}" --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --loadmodule "$MODULE" --logfile "$dir/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do valkey-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
entropy=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
sed "s/__QUEUE_ENTROPY__/$entropy/" "$root/lua-fallback/queue.lua" | valkey-cli -p "$PORT" -x FUNCTION LOAD REPLACE >/dev/null
PORT=$PORT python3 "$root/bench/backends_bench.py"

#!/usr/bin/env bash
# profile.sh -- where a module command spends its time inside valkey-server.
#
#   bash bench/profile.sh enter      # QUEUE.ENTER, as module-bench.sh drives it
#   bash bench/profile.sh status     # QUEUE.STATUS on a line of USERS users
#   bash bench/profile.sh promote    # QUEUE.PROMOTE MAX 1000 on a long line
#   bash bench/profile.sh ranks      # QUEUE.RANKS COMPACT of a whole line, 10,000 a call
#
# Starts its own valkey-server (child process, loopback, temp dir) with the module,
# fills what the command needs, records the server with `perf record` while
# valkey-benchmark (or the Python driver) runs the command, and prints the hottest
# functions (self time, then with callees). Installs `perf` (Debian: linux-perf) when
# it is missing.
#
# Environment: MODULE (default target/release/libvalkey_queue.so), USERS (100000),
# N (requests, 400000), SECONDS_REC (perf record window, 8), TOP (lines, 30).
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
LIB="$SCRIPT_DIR/lib/benchlib.py"
WHAT=${1:-status}
MODULE=${MODULE:-$REPO_ROOT/target/release/libvalkey_queue.so}
USERS=${USERS:-100000}
N=${N:-1000000}
SECONDS_REC=${SECONDS_REC:-8}
TOP=${TOP:-30}
PY=${PYTHON:-python3}

command -v perf >/dev/null || apt-get install -y -qq linux-perf >/dev/null 2>&1 \
  || sudo apt-get install -y -qq linux-perf >/dev/null 2>&1 || true
command -v perf >/dev/null || { echo "perf not found (apt-get install linux-perf)" >&2; exit 2; }
[ -f "$MODULE" ] || { echo "module not found: $MODULE (cargo build --release)" >&2; exit 2; }
"$PY" -c 'import valkey' 2>/dev/null || "$PY" -m pip install -q valkey >/dev/null 2>&1 \
  || "$PY" -m pip install -q --break-system-packages valkey >/dev/null 2>&1 || true

TMP=$(mktemp -d "${TMPDIR:-/tmp}/profile.XXXXXX")
PORT=$("$PY" "$LIB" freeport)
valkey-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" \
  --logfile "$TMP/valkey.log" --loadmodule "$MODULE" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; [ -n "${KEEP_TMP:-}" ] && echo "kept $TMP" >&2 || rm -rf "$TMP"' EXIT
for _ in $(seq 1 100); do
  [ "$("$PY" "$LIB" call "$PORT" PING 2>/dev/null)" = "reply=True" ] && break
  sleep 0.1
done

bench() { valkey-benchmark -h 127.0.0.1 -p "$PORT" -c 50 -P 16 -n "$N" -q "$@" >/dev/null 2>&1; }
case "$WHAT" in
  enter)
    "$PY" "$LIB" config "$PORT" bq soft_cap 0 >/dev/null
    run() { bench -r 100000000 QUEUE.ENTER bq __rand_int__ nick0001; } ;;
  status)
    "$PY" "$LIB" config "$PORT" bq soft_cap 0 >/dev/null
    "$PY" "$LIB" config "$PORT" bq abandon_after 0 >/dev/null
    "$PY" "$LIB" fill "$PORT" queue bq "$USERS" >/dev/null
    run() { bench -r "$USERS" QUEUE.STATUS bq __rand_int__; } ;;
  promote)
    "$PY" "$LIB" config "$PORT" bp soft_cap 0 >/dev/null
    "$PY" "$LIB" config "$PORT" bp abandon_after 0 >/dev/null
    "$PY" "$LIB" config "$PORT" bp batch_max 100000 >/dev/null
    "$PY" "$LIB" fill "$PORT" queue bp "$USERS" >/dev/null
    "$PY" "$LIB" config "$PORT" bp soft_cap 10000000 >/dev/null
    run() { for _ in $(seq 1 $((USERS / 1000 - 1))); do valkey-cli -p "$PORT" QUEUE.PROMOTE bp MAX 1000 >/dev/null; done; } ;;
  ranks)
    "$PY" "$LIB" config "$PORT" br soft_cap 0 >/dev/null
    "$PY" "$LIB" config "$PORT" br abandon_after 0 >/dev/null
    "$PY" "$LIB" fill "$PORT" queue br "$USERS" >/dev/null
    run() { for _ in 1 2 3 4 5; do "$PY" "$LIB" ranks "$PORT" br "$USERS" >/dev/null; done; } ;;
  *) echo "usage: $0 enter|status|promote|ranks" >&2; exit 2 ;;
esac

run &
DRIVER=$!
sleep 0.5
perf record -F 2999 -g -p "$PID" -o "$TMP/perf.data" -- sleep "$SECONDS_REC" >/dev/null 2>&1 || true
wait $DRIVER || true
echo "== $WHAT: self time (top $TOP)"
perf report -i "$TMP/perf.data" --no-children --stdio --sort symbol -g none 2>/dev/null \
  | grep -E '^ +[0-9]' | head -n "$TOP" || true
echo "== $WHAT: with callees (top $TOP)"
perf report -i "$TMP/perf.data" --children --stdio --sort symbol -g none 2>/dev/null \
  | grep -E '^ +[0-9]' | grep -vE '\[k\]|\] 0x|\] 0+ ' | head -n "$TOP" || true

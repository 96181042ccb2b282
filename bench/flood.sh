#!/usr/bin/env bash
# Entry floods against queue-api with its default limits (a report, not a test):
#  one   one client address, 64 connections: the per-address rate limit (20/s, burst
#        40) answers almost everything 429;
#  many  ADDRS addresses (loopback 127.0.x.y), one connection each, on a queue with
#        max_waiting MAX_WAITING: each address gets its share through the rate limit
#        until the line is full, then 503 line_full; Valkey's memory ends bounded;
#  open  the same from fresh addresses on a queue without max_waiting: the memory
#        it would have taken.
# Each round runs the three for DURATION seconds each on a fresh store; figures are medians of
# ROUNDS rounds with the spread (min-max).
#   bash bench/flood.sh                       # ROUNDS=3 DURATION=10 ADDRS=250 MAX_WAITING=20000
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS=${ROUNDS:-3}; DURATION=${DURATION:-10}; ADDRS=${ADDRS:-250}; MAX_WAITING=${MAX_WAITING:-20000}
cd "$root"
cargo build --release -q -p valkey-queue -p queue-api --bins
. "$root/bench/lib/valkey.sh"
trap 'kill ${vpid:-} ${apid:-} 2>/dev/null; wait 2>/dev/null; rm -rf "${dir:-}"' EXIT
start_valkey; aport=$(port)
RUST_LOG=warn "$root/target/release/queue-api" --valkey-url "redis://127.0.0.1:$vport/" --listen "127.0.0.1:$aport" & apid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$aport/healthz" | grep -q '"up"' && break; sleep 0.1; done
mem() { valkey-cli -p "$vport" INFO memory | awk -F: '/^used_memory:/ {print $2}' | tr -d '\r'; }
waiting() { valkey-cli -p "$vport" QUEUE.INFO default | awk 'p {print; exit} /^waiting$/ {p=1}'; }
fresh() { valkey-cli -p "$vport" FLUSHALL >/dev/null; valkey-cli -p "$vport" QUEUE.CONFIG default SET soft_cap 0 abandon_after 0 max_waiting "$1" >/dev/null; }
out="$dir/runs"; : >"$out"
for r in $(seq "$ROUNDS"); do
  # Fresh source addresses every run: the api's per-address buckets start full.
  for kind in one many open; do
    case $kind in
      one) fresh "$MAX_WAITING"; first="127.1.$r.1"; addrs=1; conns=64 ;;
      many) fresh "$MAX_WAITING"; first="127.2.$r.1"; addrs=$ADDRS; conns=$ADDRS ;;
      open) fresh 0; first="127.3.$r.1"; addrs=$ADDRS; conns=$ADDRS ;;
    esac
    base=$(mem)
    res=$(python3 "$root/bench/flood.py" "127.0.0.1:$aport" "$first" "$addrs" "$conns" "$DURATION")
    echo "{\"round\": $r, \"kind\": \"$kind\", \"result\": $res, \"waiting\": $(waiting), \"mem_base\": $base, \"mem_end\": $(mem)}" >>"$out"
  done
done
python3 - "$out" "$DURATION" "$ADDRS" "$MAX_WAITING" "$ROUNDS" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
secs, addrs, maxw, rounds = sys.argv[2:6]
def fig(values, fmt="{:,.0f}"):
    values = sorted(values)
    return f"{fmt.format(statistics.median(values))} ({fmt.format(values[0])}-{fmt.format(values[-1])})"
print(f"\nentry floods against queue-api (rate limit 20/s, burst 40 per address; {secs} s each; "
      f"median (min-max) of {rounds} rounds)")
titles = {"one": "one address, 64 connections", "many": f"{addrs} addresses, max_waiting {maxw}",
          "open": f"{addrs} addresses, no max_waiting"}
for kind in ["one", "many", "open"]:
    rs = [r for r in runs if r["kind"] == kind]
    a = lambda r, c: r["result"]["answers"].get(c, 0)
    other = lambda r: sum(v for k, v in r["result"]["answers"].items() if k not in ("200", "429", "503"))
    print(f"  {titles[kind]}:")
    print(f"    requests sent {fig([r['result']['sent'] for r in rs])}; entered (200) {fig([a(r, '200') for r in rs])}; "
          f"refused 429 {fig([a(r, '429') for r in rs])}; 503 line_full {fig([a(r, '503') for r in rs])}; other {fig([other(r) for r in rs])}")
    print(f"    waiting at the end {fig([r['waiting'] for r in rs])}; Valkey used_memory growth "
          f"{fig([(r['mem_end'] - r['mem_base']) / 1048576 for r in rs], '{:.1f}')} MiB")
PY

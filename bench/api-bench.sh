#!/usr/bin/env bash
# queue-api benchmark (a report, not a test), side by side in one run:
#  1. GET /api/queue/status throughput against a no-op axum handler in the same
#     process (wrk, interleaved rounds, medians), asked about one user over and over
#     (concurrent requests for one user share one read) and about a crowd of USERS
#     waiting users in turn (every request a different person);
#  2. SSE fan-out: STREAMS open push streams (the api runs with --max-streams STREAMS),
#     one rank change announced, time until every stream has its update, the api's
#     QUEUE.RANKS calls for it, its memory per stream and at the limit, the load
#     tool's own memory, and what 100 more streams get (503 with Retry-After).
#   bench/api-bench.sh                     # ROUNDS=5 DURATION=5 STREAMS=100000 (capped, see below)
#   ROUNDS=1 DURATION=3 STREAMS=2000 bench/api-bench.sh
# STREAMS is capped by the open-files limit this shell may raise itself to (its hard
# limit, less 1,000): each process, the api and the load tool, holds one socket per
# stream.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS=${ROUNDS:-5}; DURATION=${DURATION:-5}; STREAMS=${STREAMS:-100000}; USERS=${USERS:-10000}
command -v wrk >/dev/null || { apt-get install -y -qq wrk >/dev/null 2>&1 || sudo apt-get install -y -qq wrk >/dev/null; }
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$STREAMS" -gt "$(( $(ulimit -n) - 1000 ))" ]; then
  echo "open-files limit $(ulimit -n): STREAMS $STREAMS capped to $(( $(ulimit -n) - 1000 ))" >&2
  STREAMS=$(( $(ulimit -n) - 1000 ))
fi
cd "$root"
cargo build --release -q -p valkey-queue -p queue-api --bins --examples
. "$root/bench/lib/valkey.sh"
trap 'kill ${vpid:-} ${apid:-} 2>/dev/null; wait 2>/dev/null; rm -rf "${dir:-}"' EXIT
start_valkey; aport=$(port)
RUST_LOG=warn "$root/target/release/queue-api" --valkey-url "redis://127.0.0.1:$vport/" --listen "127.0.0.1:$aport" \
  --rate-limit 0 --bench-routes --max-streams "$STREAMS" --max-streams-per-addr 0 & apid=$!
api="http://127.0.0.1:$aport"
for _ in $(seq 100); do curl -sf "$api/healthz" | grep -q '"up"' && break; sleep 0.1; done
valkey-cli -p "$vport" QUEUE.CONFIG default SET soft_cap 0 abandon_after 0 >/dev/null
user=$(curl -sf -X POST "$api/api/queue/entry" -H 'content-type: application/json' -d '{"nickname":"bench"}' \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["userId"])')
# The crowd: USERS waiting on their own queue, u-0 .. u-<USERS-1>.
valkey-cli -p "$vport" QUEUE.CONFIG crowd SET soft_cap 0 abandon_after 0 >/dev/null
seq 0 $((USERS - 1)) | awk '{print "QUEUE.ENTER crowd u-" $1 " n" $1}' | valkey-cli -p "$vport" >/dev/null
rps() { wrk -t2 -c64 -d"${DURATION}s" "$@" | awk '/Requests\/sec/ {print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
s_all=(); c_all=(); n_all=()
for r in $(seq "$ROUNDS"); do
  s_all+=("$(rps "$api/api/queue/status?userId=$user")")
  c_all+=("$(USERS=$USERS QUEUE=crowd rps -s "$root/bench/lib/status-users.lua" "$api")")
  n_all+=("$(rps "$api/bench/noop")")
done
s=$(printf '%s\n' "${s_all[@]}" | median); c=$(printf '%s\n' "${c_all[@]}" | median)
n=$(printf '%s\n' "${n_all[@]}" | median)
fan=$("$root/target/release/examples/sse_fanout" "127.0.0.1:$aport" "redis://127.0.0.1:$vport/" "$STREAMS" "$apid")
echo
echo "queue-api benchmark ($(nproc) cores; wrk -t2 -c64 -d${DURATION}s, $ROUNDS interleaved rounds)"
printf '%-52s %12s\n' "GET /api/queue/status, one user (req/s, median)" "$s" \
  "GET /api/queue/status, $USERS users in turn (req/s, median)" "$c" "no-op axum handler (req/s, median)" "$n"
ratios() { python3 -c "
s=[float(x) for x in '$1'.split()]; n=[float(x) for x in '${n_all[*]}'.split()]
r=sorted(a/b for a,b in zip(s,n)); print(' '.join('%.3f' % x for x in r))"; }
printf '%-52s %12s\n' "status / no-op, one user (ratio of medians)" "$(python3 -c "print(round($s/$n, 3))")" \
  "status / no-op, $USERS users (ratio of medians)" "$(python3 -c "print(round($c/$n, 3))")"
echo "status / no-op per round (sorted), one user: $(ratios "${s_all[*]}"); $USERS users: $(ratios "${c_all[*]}")"
echo "SSE fan-out: $fan"

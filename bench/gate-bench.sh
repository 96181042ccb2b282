#!/usr/bin/env bash
# The gate's benchmark (a report, not a test), all figures from one run, each the
# median of interleaved rounds with the spread (min..max) printed:
#  1. proxy mode, an admitted person's requests: the gate's throughput over nginx
#     proxy_pass to the same upstream app, same load tool (wrk), same connections
#     (target >= 0.8), and the CPU time each spends per request (the gate process's,
#     nginx's workers', utime+stime from /proc: steadier than throughput on a busy
#     machine);
#  2. latency the gate adds: p99 through the gate minus p99 straight to the app, at a
#     light load of 4 connections (target <= 1 ms), nginx's beside it;
#  3. forward auth: the gate's CPU time per decision for an admitted person
#     (/gate/auth as nginx auth_request calls it; the gate process's utime+stime from
#     /proc over the decisions wrk made), and per /gate/healthz request of the same
#     process (what an HTTP request costs the gate without a decision)
#     (target <= 5 us per decision); and the decision alone, in process with no HTTP
#     (services/gate/examples/decision-cost.rs: a cached token, a few map lookups);
#     beside them the floor: nginx's CPU per request answering `return 200` itself
#     (one HTTP exchange over loopback, no upstream), same load;
#  4. Valkey calls per admitted request, from INFO commandstats over every round
#     (target 0), and the heartbeats (at most one per queue per tick per instance);
#  5. straight through: the latency a visitor's first request on an idle queue adds
#     (one QUEUE.PASS, the session made, the cookie set on the app's answer), p50 and
#     p99 against a request with a token through the same gate, sequential on a
#     kept-alive connection each (bench/lib/first_request.py), and the QUEUE.PASS
#     calls counted (exactly one per first request).
#
#   bash bench/gate-bench.sh                  # 5 rounds of 10 s
#   REDUCED=1 bash bench/gate-bench.sh        # CI: 3 short rounds, about a minute
#   ROUNDS=7 SECS=20 CONNS=64 FIRST=1000 bash bench/gate-bench.sh
#   GATE=/path/to/an/older/queue-gate bash bench/gate-bench.sh   # another build of the gate
#
# Starts its own valkey-server (module), the example upstream app
# (tests/gate/upstream.rs), the gate twice (proxy mode, and forward-auth mode for
# the CPU figure) and nginx (2 workers, as many as the gate's runtime threads), on
# free loopback ports; stops them on exit. Needs wrk and nginx (install-deps).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. bench/lib/valkey.sh

ROUNDS=${ROUNDS:-5}
SECS=${SECS:-10}
LAT_SECS=${LAT_SECS:-5}
CONNS=${CONNS:-32}
GATE=${GATE:-target/release/queue-gate}
FIRST=${FIRST:-500}
if [ -n "${REDUCED:-}" ]; then ROUNDS=3; SECS=3; LAT_SECS=2; FIRST=100; fi
TICK_MS=1000
for tool in wrk nginx curl; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || { echo "$tool is missing: run scripts/install-deps.sh" >&2; exit 2; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

[ -f target/release/libvalkey_queue.so ] || cargo build --release -q -p valkey-queue
[ -x target/release/queue-gate ] || cargo build --release -q -p queue-gate
[ -x target/release/examples/gate-upstream ] || cargo build --release -q -p e2e --example gate-upstream
[ -x target/release/examples/decision-cost ] || cargo build --release -q -p queue-gate --example decision-cost

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kill "${vpid:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "${dir:-}"
}
trap cleanup EXIT
start_valkey
url="redis://127.0.0.1:$vport/"
valkey-cli -p "$vport" QUEUE.CONFIG bench SET soft_cap 1000 session_lease 60000 >/dev/null

wait_http() { # url
  for _ in $(seq 200); do curl -sf -o /dev/null "$1" && return 0; sleep 0.05; done
  echo "$1 did not answer" >&2; return 1
}

uport=$(port) gport=$(port) aport=$(port) nport=$(port)
target/release/examples/gate-upstream --listen "127.0.0.1:$uport" & pids+=($!)
target/release/queue-gate --write-key "$dir/key.pem" >/dev/null
# wrk sends the one cookie throughout: tokens (at most the idle time) must outlive the run
# and never be due for renewal in it.
# Straight through off: /checkout must send someone without a token to the room.
gate_flags=(--valkey-url "$url" --key "$dir/key.pem" --route /checkout=bench --tick "${TICK_MS}ms"
  --idle 6h --token-ttl 6h)
straight=0
if "$GATE" --help | grep -q -- --straight-through; then straight=1; gate_flags+=(--straight-through false); fi
RUST_LOG=warn "$GATE" "${gate_flags[@]}" --listen "127.0.0.1:$gport" \
  --upstream "http://127.0.0.1:$uport" >"$dir/gate.log" 2>&1 & gpid=$!; pids+=($gpid)
RUST_LOG=warn "$GATE" "${gate_flags[@]}" --listen "127.0.0.1:$aport" \
  >"$dir/gate-auth.log" 2>&1 & apid=$!; pids+=($apid)
mkdir -p "$dir/nginx"
cat >"$dir/nginx.conf" <<NGINX
daemon off;
worker_processes 2;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/nginx/body;
    proxy_temp_path $dir/nginx/proxy;
    fastcgi_temp_path $dir/nginx/fastcgi;
    uwsgi_temp_path $dir/nginx/uwsgi;
    scgi_temp_path $dir/nginx/scgi;
    upstream app { server 127.0.0.1:$uport; keepalive 128; }
    server {
        listen 127.0.0.1:$nport;
        # The floor of one HTTP exchange on this machine: nginx answering by itself.
        location = /bench-return-200 { return 200; }
        location / {
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_pass http://app;
        }
    }
}
NGINX
"$NGINX" -c "$dir/nginx.conf" -p "$dir/nginx" -e "$dir/nginx/error.log" & npid=$!; pids+=($npid)
wait_http "http://127.0.0.1:$uport/healthz"
wait_http "http://127.0.0.1:$gport/gate/healthz"
wait_http "http://127.0.0.1:$aport/gate/healthz"
wait_http "http://127.0.0.1:$nport/healthz"
nworkers=$(pgrep -P "$npid" | tr '\n' ' ')

# One admitted person: entered straight into Valkey (promoted at once), claimed at the gate.
ticket=$(valkey-cli -p "$vport" QUEUE.ENTER bench u-bench bench | awk 'p{print; exit} $0=="ticketId"{p=1}')
[ -n "$ticket" ] || { echo "no ticket from QUEUE.ENTER" >&2; exit 1; }
token=$(curl -s -o /dev/null -D - "http://127.0.0.1:$gport/gate/claim?queue=bench&ticketId=$ticket&return=/checkout" \
  | tr -d '\r' | awk -F'[=;]' 'tolower($0) ~ /^set-cookie: queue_admission=/{print $2; exit}')
[ -n "$token" ] || { echo "the claim set no admission cookie" >&2; exit 1; }
cookie="Cookie: queue_admission=$token"
admitted() { # url [header...]: the app answered 200 (not a redirect to the room)
  local u=$1; shift
  local args=(); for h in "$@"; do args+=(-H "$h"); done
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${args[@]}" "$u")" = 200 ]
}
admitted "http://127.0.0.1:$gport/checkout" "$cookie" || { echo "the claimed token does not open /checkout" >&2; exit 1; }
admitted "http://127.0.0.1:$aport/gate/auth" "$cookie" "X-Original-URI: /checkout" \
  || { echo "/gate/auth does not admit the claimed token" >&2; exit 1; }
if admitted "http://127.0.0.1:$gport/checkout"; then echo "/checkout let someone unadmitted in" >&2; exit 1; fi

# wrk's figures: "rps p99_us non2xx"
run_wrk() { # threads conns secs url [header...]
  local t=$1 c=$2 s=$3 u=$4; shift 4
  local args=(); for h in "$@"; do args+=(-H "$h"); done
  wrk -t"$t" -c"$c" -d"${s}s" --latency "${args[@]}" "$u" | python3 -c '
import re, sys
text = sys.stdin.read()
def us(v, unit):
    return float(v) * {"us": 1, "ms": 1000, "s": 1e6}[unit]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
total = re.search(r"(\d+) requests in", text).group(1)
print(rps, us(*p99.groups()) if p99 else -1, int(bad.group(1)) if bad else 0, total,
      sum(map(int, errors.groups())) if errors else 0)'
}
cpu_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
clk=$(getconf CLK_TCK)
commandstats() { valkey-cli -p "$vport" INFO commandstats | tr -d '\r' | grep '^cmdstat_'; }

echo "gate benchmark ($(nproc) cores; $ROUNDS rounds: ${SECS}s throughput at $CONNS connections, ${LAT_SECS}s latency at 4; wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'), $("$NGINX" -v 2>&1 | sed 's/.*\///'))"
stats_before=$(commandstats)
t_start=$(date +%s.%N)
results="$dir/rounds.txt"
: >"$results"
gate_requests=0
for r in $(seq "$ROUNDS"); do
  # Interleaved: the order of nginx and the gate alternates from round to round.
  if [ $((r % 2)) = 1 ]; then order="nginx gate"; else order="gate nginx"; fi
  for who in $order; do
    if [ "$who" = nginx ]; then
      n0=$(cpu_ticks $nworkers)
      read -r n_rps _ n_bad n_total n_err < <(run_wrk 2 "$CONNS" "$SECS" "http://127.0.0.1:$nport/checkout" "$cookie")
      n1=$(cpu_ticks $nworkers)
    else
      p0=$(cpu_ticks "$gpid")
      read -r g_rps _ g_bad g_total g_err < <(run_wrk 2 "$CONNS" "$SECS" "http://127.0.0.1:$gport/checkout" "$cookie")
      p1=$(cpu_ticks "$gpid")
      gate_requests=$((gate_requests + g_total))
    fi
  done
  admitted "http://127.0.0.1:$gport/checkout" "$cookie" || { echo "round $r: the person lost access" >&2; exit 1; }
  read -r _ d_p99 _ _ _ < <(run_wrk 1 4 "$LAT_SECS" "http://127.0.0.1:$uport/checkout" "$cookie")
  read -r _ ln_p99 _ _ _ < <(run_wrk 1 4 "$LAT_SECS" "http://127.0.0.1:$nport/checkout" "$cookie")
  read -r _ lg_p99 _ lg_total _ < <(run_wrk 1 4 "$LAT_SECS" "http://127.0.0.1:$gport/checkout" "$cookie")
  gate_requests=$((gate_requests + lg_total))
  # Forward auth: CPU of the auth gate over the decisions, then over health checks.
  c0=$(cpu_ticks "$apid")
  read -r a_rps _ a_bad a_total _ < <(run_wrk 2 "$CONNS" "$SECS" "http://127.0.0.1:$aport/gate/auth" "$cookie" "X-Original-URI: /checkout")
  c1=$(cpu_ticks "$apid")
  gate_requests=$((gate_requests + a_total))
  read -r _ _ h_bad h_total _ < <(run_wrk 2 "$CONNS" "$SECS" "http://127.0.0.1:$aport/gate/healthz")
  c2=$(cpu_ticks "$apid")
  # The floor: nginx answering a request by itself (no upstream), same connections.
  f0=$(cpu_ticks $nworkers)
  read -r _ _ f_bad f_total _ < <(run_wrk 2 "$CONNS" "$SECS" "http://127.0.0.1:$nport/bench-return-200")
  f1=$(cpu_ticks $nworkers)
  # The decision alone, in process: one round of the example (ns per decision).
  read -r _ _ dc_ns < <(target/release/examples/decision-cost 1 | awk 'NR == 1')
  bad=$((n_bad + g_bad + a_bad + h_bad + f_bad + n_err + g_err))
  [ "$bad" = 0 ] || { echo "round $r: $bad failed or refused requests (nginx $n_bad, gate $g_bad, auth $a_bad, health $h_bad, nginx return 200 $f_bad; socket errors $n_err/$g_err)" >&2; exit 1; }
  python3 - "$r" "$n_rps" "$g_rps" "$d_p99" "$ln_p99" "$lg_p99" "$a_total" "$((c1 - c0))" "$h_total" "$((c2 - c1))" "$clk" "$a_rps" "$dc_ns" \
    "$g_total" "$((p1 - p0))" "$n_total" "$((n1 - n0))" "$f_total" "$((f1 - f0))" >>"$results" <<'PY'
import sys
r, n_rps, g_rps, d, ln, lg, a_total, a_ticks, h_total, h_ticks, clk, a_rps, dc_ns, g_total, g_ticks, n_total, n_ticks, f_total, f_ticks = sys.argv[1:]
n_rps, g_rps, d, ln, lg = map(float, (n_rps, g_rps, d, ln, lg))
auth_us = int(a_ticks) / int(clk) * 1e6 / int(a_total)
health_us = int(h_ticks) / int(clk) * 1e6 / int(h_total)
g_cpu = int(g_ticks) / int(clk) * 1e6 / int(g_total)
n_cpu = int(n_ticks) / int(clk) * 1e6 / int(n_total)
floor_us = int(f_ticks) / int(clk) * 1e6 / int(f_total)
print(r, g_rps / n_rps, n_rps, g_rps, lg - d, ln - d, auth_us, health_us, a_rps, float(dc_ns) / 1000, g_cpu, n_cpu, floor_us)
PY
  tail -1 "$results" | awk '{printf "round %d: throughput gate/nginx %.3f (nginx %.0f/s, gate %.0f/s; CPU per request %.1f us, nginx %.1f); p99 added: gate %.0f us, nginx %.0f us; forward auth %.2f us CPU per decision (%.0f/s), %.2f per health check, nginx return 200 %.2f; the decision alone %.3f us\n", $1, $2, $3, $4, $11, $12, $5, $6, $7, $9, $8, $13, $10}'
done
t_end=$(date +%s.%N)
stats_after=$(commandstats)

# 5. Straight through (after the Valkey count above: its calls are the point here). A
# third gate, proxy mode, on its own idle queue with room for every first request, no
# per-address limit (every request comes from 127.0.0.1).
first_results="$dir/first.txt"
: >"$first_results"
pass_calls() { commandstats | awk -F'[=,:]' '$1 == "cmdstat_queue.pass" {print $3}' | grep . || echo 0; }
if [ "$straight" = 1 ]; then
  fport=$(port)
  valkey-cli -p "$vport" QUEUE.CONFIG first SET soft_cap 1000000 session_lease 60000 >/dev/null
  RUST_LOG=warn "$GATE" --valkey-url "$url" --key "$dir/key.pem" --route /first=first --tick "${TICK_MS}ms" \
    --idle 10m --token-ttl 10m --straight-through true --straight-through-per-address 0 \
    --listen "127.0.0.1:$fport" --upstream "http://127.0.0.1:$uport" >"$dir/gate-first.log" 2>&1 & pids+=($!)
  wait_http "http://127.0.0.1:$fport/gate/healthz"
  ftoken=$(curl -s -o /dev/null -D - -H 'Accept: text/html' "http://127.0.0.1:$fport/first" \
    | tr -d '\r' | awk -F'[=;]' 'tolower($0) ~ /^set-cookie: queue_admission=/{print $2; exit}')
  [ -n "$ftoken" ] || { echo "a first request on the idle queue was not let straight in" >&2; exit 1; }
  p0=$(pass_calls)
  for r in $(seq "$ROUNDS"); do
    read -r f50 f99 t50 t99 fn < <(python3 bench/lib/first_request.py "$fport" /first "queue_admission=$ftoken" "$FIRST")
    echo "$r $f50 $f99 $t50 $t99 $fn" >>"$first_results"
    echo "round $r: first request on an idle queue p50 $f50 us, p99 $f99 us; with a token p50 $t50 us, p99 $t99 us ($fn each)"
  done
  p1=$(pass_calls)
  expected=$((ROUNDS * (FIRST + 10)))
  [ $((p1 - p0)) = "$expected" ] || { echo "QUEUE.PASS calls: $((p1 - p0)) for $expected first requests (expected one each)" >&2; exit 1; }
fi

python3 - "$results" "$t_start" "$t_end" "$gate_requests" "$TICK_MS" "$first_results" <<PY
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
elapsed = float(sys.argv[3]) - float(sys.argv[2])
requests, tick_ms = int(sys.argv[4]), int(sys.argv[5])
def col(i): return [r[i] for r in rows]
def show(name, i, fmt, target):
    v = col(i)
    print(f"  {name:<40} median {fmt.format(statistics.median(v))}  (spread {fmt.format(min(v))} .. {fmt.format(max(v))})  {target}")
print(f"summary over {len(rows)} rounds:")
show("proxy throughput, gate / nginx", 1, "{:.3f}", "target >= 0.8")
show("  nginx proxy_pass (requests/s)", 2, "{:.0f}", "")
show("  gate proxy mode (requests/s)", 3, "{:.0f}", "")
show("  gate CPU per proxied request (us)", 10, "{:.1f}", "")
show("  nginx CPU per proxied request (us)", 11, "{:.1f}", "(its 2 workers)")
show("p99 added by the gate (us, 4 conns)", 4, "{:.0f}", "target <= 1000")
show("  p99 added by nginx (us)", 5, "{:.0f}", "")
show("forward auth CPU per decision (us)", 6, "{:.2f}", "target <= 5")
show("  per /gate/healthz request (us)", 7, "{:.2f}", "")
show("  nginx return 200, per request (us)", 12, "{:.2f}", "(the floor: one HTTP exchange here, nginx answering itself)")
own = [r[6] - r[7] for r in rows]
print(f"  {'  the decision itself (auth - healthz, us)':<40} median {statistics.median(own):.2f}  (spread {min(own):.2f} .. {max(own):.2f})")
show("  the decision alone, in process (us)", 9, "{:.3f}", "target <= 5 (no HTTP, no Valkey)")
first = [list(map(float, l.split())) for l in open(sys.argv[6])]
if first:
    for name, i, j in (("p50", 1, 3), ("p99", 2, 4)):
        v = [r[i] - r[j] for r in first]
        print(f"  {'first request on an idle queue, ' + name + ' added':<40} median {statistics.median(v):.0f}  (spread {min(v):.0f} .. {max(v):.0f})  us over a request with a token (one QUEUE.PASS each)")
    for name, i in (("first request p50 / p99 (us)", 1), ("request with a token p50 / p99 (us)", 3)):
        print(f"  {'  ' + name:<40} median {statistics.median(r[i] for r in first):.0f} / {statistics.median(r[i + 1] for r in first):.0f}")
else:
    print("  first request on an idle queue: skipped (this gate has no --straight-through)")
def parse(text):
    out = {}
    for line in text.strip().splitlines():
        name, rest = line[len("cmdstat_"):].split(":", 1)
        out[name] = int(dict(kv.split("=") for kv in rest.split(","))["calls"])
    return out
before, after = parse("""$stats_before"""), parse("""$stats_after""")
delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
heartbeats = sum(v for k, v in delta.items() if "heartbeat" in k)
others = {k: v for k, v in delta.items() if "heartbeat" not in k and k not in ("info", "ping")}
# Each gate describes itself in gate:instances every 10 s (HGETALL, HSET, HDEL of
# expired entries: services/gate/src/registry.rs): that many are not per request.
described = 2 * (int(elapsed / 10) + 2)
for k in ("hgetall", "hset", "hdel"):
    if k in others:
        others[k] -= min(others[k], described)
        if others[k] == 0:
            del others[k]
per_request = sum(others.values()) / max(requests, 1)
ticks = elapsed * 1000 / tick_ms
print(f"  Valkey calls per admitted request          {per_request:.6f} over {requests} requests decided by the two gates  target 0")
print(f"    commands besides heartbeats, INFO, PING and the gates' descriptions: {others or 'none'}")
print(f"  heartbeats                                 {heartbeats} in {elapsed:.0f} s: {heartbeats / ticks:.2f} per tick for 2 instances, 1 queue (at most 2)")
sys.exit(0 if per_request == 0 and heartbeats <= 2 * ticks + 2 else 1)
PY

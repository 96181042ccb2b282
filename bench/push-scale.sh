#!/usr/bin/env bash
# push-scale.sh -- what push streams cost Valkey as instances are added (a report, not
# a test; exits 0 whatever the figures, unless CHECK=1 and a change never reached its stream). Per configuration, on a fresh valkey-server:
#   1. one queue filled with N waiting people (nobody admitted: soft_cap 0), pipelined
#      QUEUE.ENTER through valkey-cli --pipe;
#   2. I queue-api instances, each with S open push streams of people spread evenly
#      over the line, opened by `queue-cli watch streams` processes (at most
#      STREAMS_PER_PROC streams each, under the open-files limit) from 16 loopback
#      source addresses (127.0.0.x, a fresh block per configuration);
#   3. two windows of SECS seconds (`queue-cli watch drive`):
#      steady  nothing changes but the leave probe's own leaves (about 3 a second);
#      churn   ENTER_RATE entries/s at the back, LEAVE_RATE leaves/s of random people
#              in line, PROMOTE_RATE promotions/s as one QUEUE.PROMOTE MAX n every
#              PROMOTE_EVERY_MS, after raising soft_cap by MAX in the same MULTI
#              (so a ticket holder leaving frees one slot, not batch_max; tickets
#              are not claimed and expire after TICKET_TTL_MS), each followed by the
#              queue-manager's announcement on queue:{Q}:promoted (ANNOUNCE=0: none);
#      measuring Valkey's main-thread time (the usec of `INFO commandstats`, per
#      command and summed, and `INFO cpu`'s main thread) per second and per watched
#      person, and the change-to-stream latency: from the reply of a command that
#      changed a watched person's standing (a LEAVE of the person right ahead of
#      them; a PROMOTE moving the promote probe's watchers at the back) to the event
#      on their stream, p50/p99 (rank events: paced by queue-api's --push-interval,
#      API_FLAGS='--push-interval 0s' for every change at once); and the turn probes:
#      from the reply of the PROMOTE that promoted a person of the line to the
#      `promoted` event on their stream (never paced), p50/p99. And queue-api's own
#      cost: its CPU (user and system, all instances, from /proc) over the window
#      per event sent (`api us/event`), and its resident memory grown by opening the
#      streams, per stream (`api KiB/stream`).
# Configurations: for each of ROUNDS rounds, I = 1 3 6 (INSTANCES), interleaved;
# printed as a table of medians with the spread (min-max over rounds) and the ratio
# 6 instances / 1, then as JSON lines (one per configuration, phase and round, and one
# per summary row).
#
#   bash bench/push-scale.sh                        # N=200000 S=4000 ROUNDS=3 SECS=20 (~10 min)
#   QUICK=1 bash bench/push-scale.sh                # N=20000 S=500 ROUNDS=1 SECS=4 (< 2 min)
#   QUICK=1 CHECK=1 bash bench/push-scale.sh        # scripts/test.sh's run: fails when a probe's event never came
#   BACKEND=lua bash bench/push-scale.sh            # the Lua library (lua-fallback/queue.lua)
#
# Push cost: the time of the commands queue-api sends (everything but the driver's
# ENTER, LEAVE, PROMOTE, CONFIG, STATUS, PUBLISH, MULTI), summed over top-level
# commands only: commands a module or a function calls inside another (ZRANK inside
# QUEUE.STATUS, HGET inside FCALL, XADD of the change log inside LEAVE) are in their
# caller's time too, so only names matching TOP_LEVEL count in the sums (EXEC never:
# its commands count by name; the change log's readers XRANGE and XREVRANGE do). Work
# the changing commands do for push (say, writing a change log) is in their own time,
# printed per call beside. With BACKEND=lua every command is an FCALL: the slow log
# (threshold 0 during the window) splits their time by function.
#
# Binaries from env vars (defaults: this checkout's target/release, built when
# missing): API_BIN, MODULE_SO, CLI_BIN (queue-cli with `watch`), LUA_LIB;
# API_FLAGS adds flags to every queue-api. Other knobs: N, S, ROUNDS, INSTANCES, SECS,
# WARMUP, SETTLE, ENTER_RATE, LEAVE_RATE, PROMOTE_RATE, PROMOTE_EVERY_MS, PROBES,
# PROMOTE_PROBES, STREAMS_PER_PROC, OUT (directory kept with the raw results).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${QUICK:-0}" = 1 ]; then
  N=${N:-20000}; S=${S:-500}; ROUNDS=${ROUNDS:-1}; SECS=${SECS:-4}; WARMUP=${WARMUP:-1}; SETTLE=${SETTLE:-2}
else
  N=${N:-200000}; S=${S:-4000}; ROUNDS=${ROUNDS:-3}; SECS=${SECS:-20}; WARMUP=${WARMUP:-3}; SETTLE=${SETTLE:-4}
fi
INSTANCES=${INSTANCES:-1 3 6}; BACKEND=${BACKEND:-module}
export ENTER_RATE=${ENTER_RATE:-1000} LEAVE_RATE=${LEAVE_RATE:-100} PROMOTE_RATE=${PROMOTE_RATE:-500}
PROMOTE_EVERY_MS=${PROMOTE_EVERY_MS:-200}; TICKET_TTL_MS=${TICKET_TTL_MS:-5000}; ANNOUNCE=${ANNOUNCE:-1}
PROBES=${PROBES:-4}; PROMOTE_PROBES=${PROMOTE_PROBES:-4}; STREAMS_PER_PROC=${STREAMS_PER_PROC:-8000}
API_FLAGS=${API_FLAGS:-}
API_BIN=${API_BIN:-$root/target/release/queue-api}
MODULE_SO=${MODULE_SO:-$root/target/release/libvalkey_queue.so}
CLI_BIN=${CLI_BIN:-$root/target/release/queue-cli}
LUA_LIB=${LUA_LIB:-$root/lua-fallback/queue.lua}
export TOP_LEVEL=${TOP_LEVEL:-'^(queue\.|ticket\.|session\.|fcall|fcall_ro|eval|evalsha|publish|ping|hello|select|multi|xread|xreadgroup|xrange|xrevrange|xlen|xinfo|subscribe|psubscribe|ssubscribe|unsubscribe|punsubscribe|sunsubscribe|echo)'}
Q=push

command -v valkey-server >/dev/null || bash "$root/scripts/install-deps.sh"
want=()
[ -x "$API_BIN" ] || want+=(-p queue-api)
[ "$BACKEND" = lua ] || [ -f "$MODULE_SO" ] || want+=(-p valkey-queue)
"$CLI_BIN" watch --help >/dev/null 2>&1 || want+=(-p queue-cli)
if [ ${#want[@]} -gt 0 ]; then (cd "$root" && cargo build --release -q "${want[@]}"); fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
nofile=$(ulimit -n)
if [ "$nofile" != unlimited ] && [ "$STREAMS_PER_PROC" -gt $((nofile - 500)) ]; then
  STREAMS_PER_PROC=$((nofile - 500))
fi
if [ "$nofile" != unlimited ] && [ "$S" -gt $((nofile - 1000)) ]; then
  echo "open-files limit $nofile: S $S capped to $((nofile - 1000)) (each instance holds one socket per stream)" >&2
  S=$((nofile - 1000))
fi

. "$root/bench/lib/valkey.sh"
work=$(mktemp -d); OUT=${OUT:-$work}; mkdir -p "$OUT"
pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

vcli() { valkey-cli -p "$vport" "$@"; }
# A QUEUE.* command for the backend (the Lua library: FCALL queue_x 1 Q ...).
qcall() {
  local name=$1 q=$2; shift 2
  if [ "$BACKEND" = lua ]; then
    vcli FCALL "$(echo "$name" | tr 'A-Z.' 'a-z_')" 1 "$q" "$@"
  else
    vcli "$name" "$q" "$@"
  fi
}
# RESP for `QUEUE.ENTER Q p-0000000 n` .. (or the FCALL), for valkey-cli --pipe.
fill_resp() {
  awk -v n="$N" -v q="$Q" -v lua="$([ "$BACKEND" = lua ] && echo 1 || echo 0)" 'BEGIN {
    for (i = 0; i < n; i++) {
      u = sprintf("p-%07d", i)
      if (lua) printf "*6\r\n$5\r\nFCALL\r\n$11\r\nqueue_enter\r\n$1\r\n1\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\nn\r\n", length(q), q, length(u), u
      else printf "*4\r\n$11\r\nQUEUE.ENTER\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\nn\r\n", length(q), q, length(u), u
    }
  }'
}
status_sum() { # field, status files...
  local f=$1; shift
  python3 -c "import sys, json, os
t = 0
for p in sys.argv[2:]:
    try: t += json.load(open(p)).get(sys.argv[1], 0)
    except (OSError, ValueError): pass
print(t)" "$f" "$@"
}

# Resident memory of the processes (comma-separated ids), KiB in all.
rss_kb() {
  local t=0 p
  for p in ${1//,/ }; do
    t=$((t + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  echo "$t"
}

run=0
one() { # round instances
  local round=$1 inst=$2 i apis="" base parts p deadline opened
  run=$((run + 1))
  local d="$work/run$run"; mkdir -p "$d"
  # Valkey, with the module or the Lua library.
  vport=$(port)
  if [ "$BACKEND" = lua ]; then
    valkey-server --port "$vport" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" --logfile "$d/valkey.log" & pids+=($!)
    wait_valkey "$vport"
    sed "s/__QUEUE_ENTROPY__/$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')/" "$LUA_LIB" | vcli -x FUNCTION LOAD REPLACE >/dev/null
  else
    valkey-server --port "$vport" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" --logfile "$d/valkey.log" \
      --loadmodule "$MODULE_SO" & pids+=($!)
    wait_valkey "$vport"
  fi
  qcall QUEUE.CONFIG "$Q" SET soft_cap 0 abandon_after 0 >/dev/null
  fill_resp | vcli --pipe >"$d/fill.log" 2>&1 || { cat "$d/fill.log" >&2; return 1; }
  # queue-api instances.
  local apipids=""
  for i in $(seq "$inst"); do
    p=$(port)
    # shellcheck disable=SC2086
    RUST_LOG=${RUST_LOG:-warn} "$API_BIN" --valkey-url "redis://127.0.0.1:$vport/" --listen "127.0.0.1:$p" \
      --rate-limit 0 --max-streams $((S + 1000)) --max-streams-per-addr 0 $API_FLAGS >"$d/api$i.log" 2>&1 & pids+=($!)
    apis="${apis:+$apis,}127.0.0.1:$p"; apipids="${apipids:+$apipids,}$!"
  done
  for a in ${apis//,/ }; do
    for _ in $(seq 200); do curl -sf "http://$a/healthz" 2>/dev/null | grep -q '"up"' && break; sleep 0.1; done
  done
  local rss_base; rss_base=$(rss_kb "$apipids")
  # The streams, from a fresh block of source addresses (ports of earlier runs may
  # still be in TIME_WAIT).
  base=$(( 2 + ((run - 1) * 20) % 220 ))
  parts=$(( (inst * S + STREAMS_PER_PROC - 1) / STREAMS_PER_PROC ))
  local files=()
  for p in $(seq 0 $((parts - 1))); do
    "$CLI_BIN" watch streams --api "$apis" --queue "$Q" --line "$N" --per-instance "$S" --part "$p" --parts "$parts" \
      --source-base "$base" --sources 16 --status "$d/streams$p.json" --max-secs 1800 >"$d/streams$p.log" 2>&1 & pids+=($!)
    files+=("$d/streams$p.json")
  done
  deadline=$((SECONDS + 300)); opened=0
  while [ $SECONDS -lt $deadline ]; do
    opened=$(status_sum opened "${files[@]}")
    [ "$opened" -ge $((inst * S)) ] && break
    [ $(( $(status_sum failed "${files[@]}") + opened )) -ge $((inst * S)) ] && break
    sleep 0.5
  done
  [ "$opened" -ge $((inst * S)) ] || echo "round $round, I=$inst: only $opened of $((inst * S)) streams opened" >&2
  sleep "$SETTLE"
  # queue-api's memory for the open streams (resident, all instances).
  local rss_streams; rss_streams=$(rss_kb "$apipids")
  local common=(--valkey "redis://127.0.0.1:$vport/" --api "$apis" --queue "$Q" --backend "$BACKEND" --line "$N"
    --secs "$SECS" --leave-probes "$PROBES" --source $((base + 16)) --status "$(IFS=,; echo "${files[*]}")"
    --api-pids "$apipids")
  "$CLI_BIN" watch drive "${common[@]}" --warmup 1 --tag s --out "$d/steady.json"
  qcall QUEUE.CONFIG "$Q" SET ticket_ttl "$TICKET_TTL_MS" >/dev/null
  "$CLI_BIN" watch drive "${common[@]}" --warmup "$WARMUP" --enter-rate "$ENTER_RATE" --leave-rate "$LEAVE_RATE" \
    --promote-rate "$PROMOTE_RATE" --promote-every-ms "$PROMOTE_EVERY_MS" --promote-probes "$PROMOTE_PROBES" \
    --announce "$([ "$ANNOUNCE" = 1 ] && echo true || echo false)" --tag c --out "$d/churn.json"
  for ph in steady churn; do
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); r.update(round=int(sys.argv[2]), instances=int(sys.argv[3]), phase=sys.argv[4], streams_per_instance=int(sys.argv[5]), line=int(sys.argv[6]), api_rss_base_kb=int(sys.argv[7]), api_rss_streams_kb=int(sys.argv[8])); print(json.dumps(r))" \
      "$d/$ph.json" "$round" "$inst" "$ph" "$S" "$N" "$rss_base" "$rss_streams" >>"$OUT/raw.jsonl"
  done
  stop_all
  echo "round $round, I=$inst done ($(status_sum opened "${files[@]}") streams)" >&2
  rm -rf "$d"
}

: >"$OUT/raw.jsonl"
echo "push-scale: $BACKEND, N=$N, S=$S per instance, I in ($INSTANCES), $ROUNDS round(s), ${SECS}s windows; $(nproc) cores, valkey $(valkey-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2)" >&2
for r in $(seq "$ROUNDS"); do
  for i in $INSTANCES; do one "$r" "$i"; done
done
python3 "$root/bench/lib/push_summary.py" "$OUT/raw.jsonl" | tee "$OUT/summary.txt"
[ "$OUT" = "$work" ] || echo "raw results: $OUT/raw.jsonl" >&2
# CHECK=1 (scripts/test.sh): fail when a change never reached the stream it concerned
# (a probe timed out), no probe was measured, or the churn phase delivered no events.
if [ "${CHECK:-0}" = 1 ]; then
  python3 - "$OUT/summary.txt" <<'PY'
import json, sys
bad = []
for line in open(sys.argv[1]):
    if not line.startswith('{"kind": "run"'):
        continue
    r = json.loads(line)
    where = "%s I=%s round %s" % (r["phase"], r["instances"], r["round"])
    if r.get("leave_timeouts") or r.get("promote_timeouts") or r.get("turn_timeouts"):
        bad.append("%s: %s leave, %s promote and %s turn probes never saw their event" % (where, r.get("leave_timeouts"), r.get("promote_timeouts"), r.get("turn_timeouts")))
    if not r.get("leave_n"):
        bad.append("%s: no leave probe measured" % where)
    if r["phase"] == "churn" and not (r.get("events_per_s") and r.get("promote_n") and r.get("turn_n")):
        bad.append("%s: no events, no promote or no turn probe under churn" % where)
for b in bad:
    print("push-scale check failed: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
fi

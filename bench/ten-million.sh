#!/usr/bin/env bash
# ten-million.sh -- ten million people in one queue: what the line's length costs.
#
#   bash bench/ten-million.sh                  # N=10,000,000, module and Lua library
#                                              # (about an hour on 2 busy cores; the Lua fill is most of it)
#   QUICK=1 bash bench/ten-million.sh          # N=1,000,000 to try it out (several minutes)
#   QUICK=1 N=20000 SMALL=2000 ROUNDS=1 STATUS_REQS=20000 ENTER_REQS=2000 bash bench/ten-million.sh
#                                              # the CI form (under a minute): its checks only
#
# For each backend (the module, then the Lua library) on a fresh valkey-server of its
# own: fill one queue with SMALL people and measure, then a fresh queue with N people
# and measure the same, and print both with the ratio N/SMALL:
#   - memory per person (INFO memory used_memory growth / people) and the fill rate
#     (QUEUE.ENTER, or FCALL queue_enter, as RESP through `valkey-cli --pipe`);
#   - QUEUE.STATUS of a random waiting person and QUEUE.ENTER of newcomers
#     (valkey-benchmark -c 50 -P 16): the server's time per call (INFO commandstats
#     usec_per_call, reset before each round; the primary figure) and the client's
#     requests per second (secondary: the client shares the 2 cores);
#   - QUEUE.PROMOTE MAX 1000: server time, and the nested calls it made;
#   - the whole line walked with QUEUE.LINE pages of 10,000 (server and wall time);
#   - a queue-api instance's start (until /healthz says Valkey is up) and its first
#     status and first push stream of one person, wall time and Valkey time;
# and at N only: BGSAVE, AOF rewrite, a restart from the RDB file and one from the
# AOF (until PING answers, i.e. loading is done), and a new replica's full sync
# (until master_link_status:up and master_sync_in_progress:0). Each restart and
# each replica must come back with the same people (DBSIZE, waiting and joining),
# else the run fails.
#
# Repeated figures are the median of ROUNDS with the spread (min-max).
#
# Environment:
#   BACKEND      module | lua | both                              (default both)
#   N            people in the big queue                          (default 10000000; QUICK=1: 1000000)
#   SMALL        people in the queue it is compared with          (default 100000)
#   ROUNDS       rounds of each repeated measurement              (default 3)
#   STATUS_REQS  QUEUE.STATUS requests per round                  (default 200000)
#   ENTER_REQS   QUEUE.ENTER requests per round                   (default 20000)
#   BASE_PORT    first port tried; ports go up from it            (default 46400)
#   MODULE       module .so      (default <repo>/target/release/libvalkey_queue.so)
#   LUA_LIB      Lua library     (default <repo>/lua-fallback/queue.lua)
#   QUEUE_API    queue-api binary (default <repo>/target/release/queue-api; missing:
#                the queue-api rows are skipped)
#   REPLICA_LOCK a file: the replica rounds hold it (flock), so that two runs side by
#                side (BACKEND=module and BACKEND=lua at once) keep three servers at most
#   KEEP_TMP=1   keep the temp dir (server logs, RDB and AOF files)
#   PROFILE=1    instead of the figures: where QUEUE.PROMOTE MAX 1000's and QUEUE.STATUS's
#                time goes at SMALL and at N (`perf record -g` of the server while one
#                connection repeats PROMOTE, and while valkey-benchmark runs STATUS, for
#                PROFILE_SECS each, default 8); prints the hottest functions, self time
#                and with callees (needs perf: apt-get install linux-perf)
#
# Memory: about 1.7 GiB per server at 10 million people with the module; at most two
# servers run at once (the master and its new replica). Every child (servers,
# queue-api, clients) is killed on exit. Exits 1 when a step failed (a command
# error, a fill that lost people, a restart or replica without the same people),
# 2 when it cannot run at all.
set -uo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
HELPER="$SCRIPT_DIR/lib/tenm.py"

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then N=${N:-1000000}; else N=${N:-10000000}; fi
SMALL=${SMALL:-100000}
ROUNDS=${ROUNDS:-3}
BACKEND=${BACKEND:-both}
STATUS_REQS=${STATUS_REQS:-200000}
ENTER_REQS=${ENTER_REQS:-20000}
BASE_PORT=${BASE_PORT:-46400}
MODULE=${MODULE:-$REPO_ROOT/target/release/libvalkey_queue.so}
LUA_LIB=${LUA_LIB:-$REPO_ROOT/lua-fallback/queue.lua}
QUEUE_API=${QUEUE_API:-$REPO_ROOT/target/release/queue-api}
PAGE=10000
PROMOTE_MAX=1000
LOAD_TIMEOUT=1800   # seconds a restart or a replica may take to load
PROFILE=${PROFILE:-0}
REPLICA_LOCK=${REPLICA_LOCK:-}
PROFILE_SECS=${PROFILE_SECS:-8}

ID_PREFIX=$(python3 -c "import sys; sys.path.insert(0, '$SCRIPT_DIR/lib'); import tenm; print(tenm.ID_PREFIX)")
NEW_PREFIX="10000000-0000-4000-8000-"   # newcomers in the ENTER rounds: nobody filled has it

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ten-million.XXXXXX")
: >"$TMP/pids"; : >"$TMP/failures"
T_START=$(date +%s)

log() { printf '[%5ds] %s\n' "$(( $(date +%s) - T_START ))" "$*" >&2; }
fail() { printf '%s\n' "$*" >>"$TMP/failures"; log "FAIL: $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f\n", b - a }'; }   # seconds since $1

cleanup() {
  local p
  while read -r p; do [ -n "$p" ] && kill "$p" 2>/dev/null; done <"$TMP/pids"
  while read -r p; do
    [ -n "$p" ] || continue
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done <"$TMP/pids"
  wait 2>/dev/null
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ preflight
case "$BACKEND" in module) BACKENDS=(module) ;; lua) BACKENDS=(lua) ;; both) BACKENDS=(module lua) ;;
  *) echo "BACKEND must be module, lua or both" >&2; exit 2 ;; esac
for b in valkey-server valkey-cli valkey-benchmark python3 curl; do
  command -v "$b" >/dev/null || { echo "$b not found (bash scripts/install-deps.sh)" >&2; exit 2; }
done
for v in N SMALL ROUNDS STATUS_REQS ENTER_REQS BASE_PORT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer, not '${!v}'" >&2; exit 2; }
done
[ "$SMALL" -lt "$N" ] || { echo "SMALL ($SMALL) must be below N ($N)" >&2; exit 2; }
[[ " ${BACKENDS[*]} " == *" module "* ]] && [ ! -f "$MODULE" ] && {
  echo "module not found: $MODULE (cargo build --release, or MODULE=...)" >&2; exit 2; }
[[ " ${BACKENDS[*]} " == *" lua "* ]] && [ ! -f "$LUA_LIB" ] && {
  echo "Lua library not found: $LUA_LIB (LUA_LIB=...)" >&2; exit 2; }
if [ "$PROFILE" = 1 ]; then
  command -v perf >/dev/null || { echo "PROFILE=1 needs perf (apt-get install linux-perf)" >&2; exit 2; }
fi
if [ ! -x "$QUEUE_API" ]; then
  log "queue-api not found at $QUEUE_API (cargo build --release -p queue-api): its rows are skipped"
  QUEUE_API=""
fi

# ------------------------------------------------------------------ functions
NEXT_PORT=$BASE_PORT
free_port() {  # the next free loopback port from BASE_PORT up
  local p
  while :; do
    p=$NEXT_PORT; NEXT_PORT=$((NEXT_PORT + 1))
    python3 -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', $p))" 2>/dev/null && { echo "$p"; return; }
  done
}
cli() { local p=$1; shift; valkey-cli -p "$p" "$@" 2>&1; }
# qc PORT NAME Q ARGS...: the queue command on the backend under test (as valkey-cli args)
qargs() {
  local name=$1 q=$2; shift 2
  if [ "$B" = lua ]; then echo "FCALL queue_${name,,} 1 $q $*"; else echo "QUEUE.${name^^} $q $*"; fi
}
qc() { local p=$1; shift; # shellcheck disable=SC2046
  valkey-cli -p "$p" $(qargs "$@") 2>&1; }
info_field() { cli "$1" INFO "$2" | tr -d '\r' | sed -n "s/^$3://p" | head -n1; }
stat_name() { if [ "$B" = lua ]; then echo fcall; else echo "queue.${1,,}"; fi; }
usec_per_call() { cli "$1" INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$2:.*usec_per_call=\([0-9.]*\).*/\1/p"; }
# every command's calls and usec since the last reset, except our own INFO/CONFIG
stats_line() {
  python3 "$HELPER" stats "$1" | awk '$1 !~ /^(info|config|ping)/ && $1 !~ /^config/ { printf "%s %s calls %s us; ", $1, $2, $3 }'
}
stats_usec() {
  python3 "$HELPER" stats "$1" | awk '$1 !~ /^(info|config|ping)/ && $1 !~ /^config/ { s += $3 } END { print s + 0 }'
}
people() {  # people PORT Q: "dbsize waiting joining" (what a restart must keep)
  local out
  out=$(qc "$1" INFO "$2" | tr -d '\r')
  # By name, whatever order the reply's fields come in.
  echo "$(cli "$1" DBSIZE) $(awk 'k { v[k] = $0; k = "" } /^(waiting|joining)$/ && !($0 in v) { k = $0 } END { print v["waiting"], v["joining"] }' <<<"$out")"
}

# start_server NAME DIR [valkey-server args...]: a child valkey-server, waited for
# until PING answers PONG (after loading); sets SPORT, SPID and START_S (seconds).
start_server() {
  local name=$1 dir=$2; shift 2
  local load=()
  [ "$B" = module ] && load=(--loadmodule "$MODULE")
  mkdir -p "$dir"
  SPORT=$(free_port)
  local t0; t0=$(now)
  valkey-server --port "$SPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --logfile "$TMP/$name.log" "${load[@]}" "$@" &
  SPID=$!; echo "$SPID" >>"$TMP/pids"
  local deadline=$(( $(date +%s) + LOAD_TIMEOUT ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    kill -0 "$SPID" 2>/dev/null || break
    [ "$(valkey-cli -p "$SPORT" PING 2>/dev/null)" = PONG ] && { START_S=$(since "$t0"); return 0; }
    sleep 0.05
  done
  fail "$name: valkey-server on port $SPORT did not answer (log: $(tail -n 3 "$TMP/$name.log" | tr '\n' ' '))"
  START_S=NA
  return 1
}
stop_server() {  # stop_server PORT PID: SHUTDOWN NOSAVE, waited for
  valkey-cli -p "$1" SHUTDOWN NOSAVE >/dev/null 2>&1
  for _ in $(seq 1 3000); do   # gone, or exited and not waited for yet (a zombie)
    case "$(awk '{print $3}' "/proc/$2/stat" 2>/dev/null)" in ""|Z) break ;; esac
    sleep 0.01
  done
  kill -9 "$2" 2>/dev/null
  wait "$2" 2>/dev/null
}
load_lua() {  # into a fresh server (restarts and replicas get it from the RDB/AOF/master)
  [ "$B" = lua ] || return 0
  local out; out=$(valkey-cli -p "$1" -x FUNCTION LOAD REPLACE <"$LUA_LIB" 2>&1)
  [ "$out" = queue ] || { fail "FUNCTION LOAD: $out"; return 1; }
}
config_queue() {  # config_queue PORT Q FIELD VALUE...
  local p=$1 q=$2; shift 2
  local out; out=$(qc "$p" CONFIG "$q" SET "$@")
  [[ $out == *ERR* || $out == *rror* ]] && fail "QUEUE.CONFIG $q SET $*: $out"
}

# Values: R[size:key] holds one round's value after another, space-separated.
declare -A R
add() { R[$1]="${R[$1]:-}${R[$1]:+ }$2"; }
med() {  # the median of the values of key $1 (NA when none)
  tr ' ' '\n' <<<"${R[$1]:-}" | grep -E '^[0-9.]+$' | sort -g \
    | awk '{a[NR]=$1} END { if (NR==0) print "NA"; else if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2 }'
}
shown() {  # "median (min-max)" of key $1, with $2 decimals
  tr ' ' '\n' <<<"${R[$1]:-}" | grep -E '^[0-9.]+$' | sort -g | awk -v d="${2:-1}" '
    {a[NR]=$1} END { if (NR==0) { print "NA"; exit }
      m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2
      f = "%." d "f"
      if (NR==1) printf f "\n", m; else printf f " (" f "-" f ")\n", m, a[1], a[NR] }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a=="NA" || b=="NA" || b+0==0) print "NA"; else printf "%.2f\n", a/b }'; }

# ------------------------------------------------------------------ measurements
# fill PORT Q COUNT SIZE: COUNT people into Q through the real command, memory growth
fill() {
  local p=$1 q=$2 count=$3 size=$4
  local m0 t0 out secs m1
  m0=$(info_field "$p" memory used_memory)
  t0=$(now)
  out=$(python3 "$HELPER" gen "$B" "$q" 0 "$count" | valkey-cli -p "$p" --pipe 2>&1 | tr -d '\r')
  secs=$(since "$t0")
  m1=$(info_field "$p" memory used_memory)
  grep -q "errors: 0, replies: $count" <<<"$out" || fail "$size: fill of $count: $(tail -n1 <<<"$out")"
  local w; w=$(people "$p" "$q" | awk '{print $2}')
  [ "$w" = "$count" ] || fail "$size: $count entered but $w waiting"
  add "$size:mem" "$(awk -v a="$m0" -v b="$m1" -v n="$count" 'BEGIN { printf "%.1f", (b - a) / n }')"
  add "$size:fill" "$(awk -v n="$count" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')"
  log "$size: $count people in ${secs}s, used_memory $m0 -> $m1"
}

bench_rps() {  # bench_rps PORT REQS KEYSPACE ARGS...: requests/second or NA
  local p=$1 n=$2 r=$3; shift 3
  local out rps
  out=$(valkey-benchmark -p "$p" -c 50 -P 16 -n "$n" -r "$r" -q "$@" 2>&1 | tr '\r' '\n')
  rps=$(grep -E 'requests per second' <<<"$out" | tail -n1 | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/')
  echo "${rps:-NA}"
}

measure() {  # measure PORT Q SIZE LABEL: the repeated measurements on a queue of SIZE people
  local p=$1 q=$2 size=$3 label=$4 i out x us nested errs
  for i in $(seq 1 "$ROUNDS"); do
    errs=$(info_field "$p" errorstats total_error_replies)
    # STATUS of random waiting people (ids 0..SIZE-1, all in line)
    cli "$p" CONFIG RESETSTAT >/dev/null
    # shellcheck disable=SC2046
    x=$(bench_rps "$p" "$STATUS_REQS" "$size" $(qargs STATUS "$q" "${ID_PREFIX}__rand_int__"))
    us=$(usec_per_call "$p" "$(stat_name STATUS)"); nested=$(usec_per_call "$p" zrank)
    add "$label:status_rps" "$x"; add "$label:status_us" "${us:-NA}"; add "$label:status_zrank_us" "${nested:-NA}"
    log "$label round $i: STATUS $x rps, ${us:-NA} us/call; its calls: $(stats_line "$p")"
    [ "$x" != NA ] && [ -n "$us" ] || fail "$label: STATUS benchmark failed"
    # the whole line with QUEUE.LINE (round 1 only walks what the fill put in)
    cli "$p" CONFIG RESETSTAT >/dev/null
    out=$(python3 "$HELPER" line "$B" "$p" "$q" "$PAGE" 2>&1)
    local users; users=$(sed -n 's/^users=//p' <<<"$out")
    [ "$i" -gt 1 ] || [ "$users" = "$size" ] || fail "$label: QUEUE.LINE listed ${users:-nothing} of $size ($out)"
    add "$label:line_ms" "$(stats_usec "$p" | awk '{ printf "%.1f", $1 / 1000 }')"
    add "$label:line_wall_ms" "$(sed -n 's/^wall_ms=//p' <<<"$out")"
    # PROMOTE MAX 1000 from the head
    cli "$p" CONFIG RESETSTAT >/dev/null
    out=$(qc "$p" PROMOTE "$q" MAX "$PROMOTE_MAX" | tr -d '\r')
    us=$(usec_per_call "$p" "$(stat_name PROMOTE)")
    awk 'p { print; exit } /^promoted$/ { p = 1 }' <<<"$out" | grep -qx "$PROMOTE_MAX" \
      || fail "$label: PROMOTE MAX $PROMOTE_MAX did not promote $PROMOTE_MAX: $(tr '\n' ' ' <<<"$out" | cut -c1-200)"
    add "$label:promote_us" "${us:-NA}"
    log "$label round $i: PROMOTE MAX $PROMOTE_MAX ${us:-NA} us; its calls: $(stats_line "$p")"
    # ENTER of newcomers at the back
    cli "$p" CONFIG RESETSTAT >/dev/null
    # shellcheck disable=SC2046
    x=$(bench_rps "$p" "$ENTER_REQS" 1000000000 $(qargs ENTER "$q" "${NEW_PREFIX}__rand_int__" nick0001))
    us=$(usec_per_call "$p" "$(stat_name ENTER)")
    add "$label:enter_rps" "$x"; add "$label:enter_us" "${us:-NA}"
    log "$label round $i: ENTER $x rps, ${us:-NA} us/call"
    [ "$x" != NA ] && [ -n "$us" ] || fail "$label: ENTER benchmark failed"
    [ "$(info_field "$p" errorstats total_error_replies)" = "$errs" ] || fail "$label: error replies in round $i"
  done
}

api_round() {  # api_round PORT Q SIZE LABEL: queue-api's start, first status, first stream
  local p=$1 q=$2 size=$3 label=$4
  [ -n "$QUEUE_API" ] || return 0
  local aport api apid t0 secs body code user
  aport=$(free_port); api="http://127.0.0.1:$aport"
  cli "$p" CONFIG RESETSTAT >/dev/null
  t0=$(now)
  RUST_LOG=warn "$QUEUE_API" --valkey-url "redis://127.0.0.1:$p/" --listen "127.0.0.1:$aport" \
    --rate-limit 0 >>"$TMP/queue-api.log" 2>&1 &
  apid=$!; echo "$apid" >>"$TMP/pids"
  secs=NA
  for _ in $(seq 1 1200); do
    curl -sf "$api/healthz" 2>/dev/null | grep -q '"up"' && { secs=$(since "$t0"); break; }
    kill -0 "$apid" 2>/dev/null || break
    sleep 0.05
  done
  if [ "$secs" = NA ]; then
    fail "$label: queue-api did not come up (log: $(tail -n 3 "$TMP/queue-api.log" | tr '\n' ' '))"
  else
    add "$label:api_start_ms" "$(awk -v s="$secs" 'BEGIN { printf "%.0f", s * 1000 }')"
    add "$label:api_start_vus" "$(stats_usec "$p")"
    log "$label: queue-api up in ${secs}s; its Valkey calls: $(stats_line "$p")"
    # the first status of a random waiting person (past the promoted ones at the head)
    user="${ID_PREFIX}$(printf '%012d' $(( (RANDOM * 32768 + RANDOM) % (size / 2) + size / 2 )))"
    cli "$p" CONFIG RESETSTAT >/dev/null
    out=$(curl -s -o "$TMP/status.json" -w '%{http_code} %{time_total}' "$api/api/queue/status?queue=$q&userId=$user")
    code=${out% *}
    if [ "$code" = 200 ] && grep -q WAITING "$TMP/status.json"; then
      add "$label:api_status_ms" "$(awk -v s="${out#* }" 'BEGIN { printf "%.2f", s * 1000 }')"
      add "$label:api_status_vus" "$(stats_usec "$p")"
      log "$label: first status ${out#* }s; its Valkey calls: $(stats_line "$p")"
    else
      fail "$label: status of $user: HTTP $code $(head -c 200 "$TMP/status.json")"
    fi
    # the first push stream of another one: until its first event
    user="${ID_PREFIX}$(printf '%012d' $(( (RANDOM * 32768 + RANDOM) % (size / 2) + size / 2 )))"
    cli "$p" CONFIG RESETSTAT >/dev/null
    : >"$TMP/stream.out"
    t0=$(now)
    curl -sN --max-time 60 "$api/api/queue/stream?queue=$q&userId=$user" >"$TMP/stream.out" 2>/dev/null &
    local cpid=$! got=""
    echo "$cpid" >>"$TMP/pids"
    for _ in $(seq 1 6000); do
      grep -q '^data:' "$TMP/stream.out" && { got=$(since "$t0"); break; }
      kill -0 "$cpid" 2>/dev/null || break
      sleep 0.01
    done
    if [ -n "$got" ]; then
      sleep 0.2   # the WATCH's reply and the instance's lease are written by then
      add "$label:api_stream_ms" "$(awk -v s="$got" 'BEGIN { printf "%.1f", s * 1000 }')"
      add "$label:api_stream_vus" "$(stats_usec "$p")"
      log "$label: first stream event after ${got}s; Valkey calls: $(stats_line "$p")"
    else
      fail "$label: no stream event for $user ($(head -c 200 "$TMP/stream.out"))"
    fi
    kill "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
  fi
  kill "$apid" 2>/dev/null; wait "$apid" 2>/dev/null
}

wait_persistence() {  # wait_persistence PORT FIELD: until INFO persistence FIELD is 0
  local deadline=$(( $(date +%s) + LOAD_TIMEOUT ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    [ "$(info_field "$1" persistence "$2")" = 0 ] && return 0
    sleep 0.05
  done
  return 1
}

persistence() {  # persistence Q: BGSAVE, AOF rewrite, restarts and replicas at N
  local q=$1 dir="$TMP/$B-big" i t0 secs before after out
  before=$(people "$PORT" "$q")
  log "N: before the persistence steps: dbsize waiting joining = $before"
  for i in $(seq 1 "$ROUNDS"); do
    t0=$(now)
    out=$(cli "$PORT" BGSAVE)
    wait_persistence "$PORT" rdb_bgsave_in_progress || fail "BGSAVE did not end"
    secs=$(since "$t0")
    [ "$(info_field "$PORT" persistence rdb_last_bgsave_status)" = ok ] || fail "BGSAVE failed: $out"
    add "N:bgsave_s" "$secs"
    log "BGSAVE round $i: ${secs}s wall, rdb_last_bgsave_time_sec $(info_field "$PORT" persistence rdb_last_bgsave_time_sec), fork $(info_field "$PORT" stats latest_fork_usec) us"
  done
  R[N:rdb_mb]=$(du -m "$dir/dump.rdb" | awk '{print $1}')
  # AOF on: turning it on is itself a rewrite; then the timed rewrites
  cli "$PORT" CONFIG SET appendonly yes >/dev/null
  sleep 0.2
  wait_persistence "$PORT" aof_rewrite_in_progress && wait_persistence "$PORT" aof_rewrite_scheduled \
    || fail "the first AOF rewrite did not end"
  for i in $(seq 1 "$ROUNDS"); do
    t0=$(now)
    out=$(cli "$PORT" BGREWRITEAOF)
    sleep 0.05
    wait_persistence "$PORT" aof_rewrite_in_progress && wait_persistence "$PORT" aof_rewrite_scheduled \
      || fail "BGREWRITEAOF did not end"
    secs=$(since "$t0")
    [ "$(info_field "$PORT" persistence aof_last_bgrewrite_status)" = ok ] || fail "BGREWRITEAOF failed: $out"
    add "N:aof_s" "$secs"
    log "BGREWRITEAOF round $i: ${secs}s wall, aof_last_rewrite_time_sec $(info_field "$PORT" persistence aof_last_rewrite_time_sec)"
  done
  R[N:aof_mb]=$(du -sm "$dir/appendonlydir" | awk '{print $1}')
  # restarts: from the RDB file (AOF off), then from the AOF
  local mode
  for mode in rdb aof; do
    for i in $(seq 1 "$ROUNDS"); do
      stop_server "$PORT" "$SPID_MAIN"
      local aof=no; [ "$mode" = aof ] && aof=yes   # appendonly yes: loads the AOF, not the RDB
      start_server "$B-$mode-$i" "$dir" --appendonly "$aof" || return 1
      PORT=$SPORT; SPID_MAIN=$SPID
      after=$(people "$PORT" "$q")
      [ "$after" = "$before" ] || fail "restart from $mode: '$after' after, '$before' before"
      add "N:restart_${mode}_s" "$START_S"
      log "restart from $mode round $i: ${START_S}s until PING answered; $after"
    done
  done
  # new replicas: a second server with an empty dir, REPLICAOF the master
  cli "$PORT" CONFIG SET repl-diskless-sync-delay 0 >/dev/null
  if [ -n "$REPLICA_LOCK" ]; then   # two runs side by side: one replica at a time
    exec 9>>"$REPLICA_LOCK"
    log "waiting for the lock $REPLICA_LOCK"
    flock 9
  fi
  for i in $(seq 1 "$ROUNDS"); do
    rm -rf "$TMP/replica"
    local port0=$PORT rpid rport
    start_server "$B-replica-$i" "$TMP/replica" || return 1
    rpid=$SPID; rport=$SPORT
    t0=$(now)
    cli "$rport" REPLICAOF 127.0.0.1 "$port0" >/dev/null
    local deadline=$(( $(date +%s) + LOAD_TIMEOUT )) ok=""
    sleep 0.1
    while [ "$(date +%s)" -lt "$deadline" ]; do
      out=$(cli "$rport" INFO replication | tr -d '\r')
      grep -q '^master_link_status:up' <<<"$out" && grep -q '^master_sync_in_progress:0' <<<"$out" \
        && { ok=1; break; }
      sleep 0.05
    done
    secs=$(since "$t0")
    [ -n "$ok" ] || fail "replica $i did not finish its sync"
    after=$(people "$rport" "$q")
    [ "$after" = "$before" ] || fail "replica $i: '$after' on the replica, '$before' on the master"
    add "N:replica_s" "$secs"
    log "replica round $i: ${secs}s until in sync; $after"
    stop_server "$rport" "$rpid"
  done
  rm -rf "$TMP/replica"
  [ -z "$REPLICA_LOCK" ] || exec 9>&-
}

profile() {  # profile PORT PID Q SIZE LABEL: perf of PROMOTE MAX 1000, then of STATUS
  local p=$1 pid=$2 q=$3 size=$4 label=$5 what data out
  for what in promote status zrank; do
    data="$TMP/perf-$B-$label-$what.data"
    cli "$p" CONFIG RESETSTAT >/dev/null
    if [ "$what" = promote ]; then
      # at most half the line, so that every call promotes 1000
      perf record -F 20000 -g -p "$pid" -o "$data" -- \
        python3 "$HELPER" repeat "$B" "$p" "$PROFILE_SECS" $(( size / PROMOTE_MAX / 2 )) PROMOTE "$q" MAX "$PROMOTE_MAX" \
        >/dev/null 2>"$TMP/perf.err" \
        || fail "perf record: $(tail -n 2 "$TMP/perf.err")"
    else
      # STATUS of random waiting people; zrank: the bare ZRANK of the same people in
      # the line's zset, what STATUS's nested rank lookup costs at the least
      local args; args=$(qargs STATUS "$q" "${ID_PREFIX}__rand_int__")
      [ "$what" = zrank ] && args="ZRANK queue:{$q}:waiting ${ID_PREFIX}__rand_int__"
      # shellcheck disable=SC2086
      perf record -F 2999 -g -p "$pid" -o "$data" -- \
        timeout "$PROFILE_SECS" valkey-benchmark -p "$p" -c 50 -P 16 -n 100000000 -r "$size" -q \
        $args >/dev/null 2>"$TMP/perf.err"
    fi
    local st; st=$(stat_name "${what^^}"); [ "$what" = zrank ] && st=zrank
    echo
    echo "== backend $B, $what, a line of $size ($label): server time per call $(usec_per_call "$p" "$st") us; calls: $(stats_line "$p")"
    # user-space symbols only (idle time sits in the kernel's epoll_wait); percentages
    # are of all samples: compare with processCommand's, the commands' whole
    echo "-- self time, user space (top 25; % of all samples)"
    perf report -i "$data" --no-children --stdio --sort symbol -g none 2>/dev/null | grep -E '^ +[0-9].*\[\.\]' \
      | grep -vE '\] 0x|\] 0+ ' | head -n 25 | sed -E 's/ +- +- *$//'
    echo "-- with callees, user space (top 45)"
    perf report -i "$data" --children --stdio --sort symbol -g none 2>/dev/null | grep -E '^ +[0-9].*\[\.\]' \
      | grep -vE '\] 0x|\] 0+ ' | head -n 45 | sed -E 's/ +- +- *$//'
    rm -f "$data"
  done
}

# ------------------------------------------------------------------ per backend
report() {  # the table of backend $B
  local fmt='%-44s %22s %22s %8s\n'
  echo
  echo "backend $B: one queue of SMALL=$SMALL and of N=$N people ($(valkey-server --version | grep -oE 'v=[^ ]+'), $(nproc) cores, ROUNDS=$ROUNDS)"
  printf "$fmt" "figure (median (min-max) of ROUNDS)" "SMALL" "N" "N/SMALL"
  printf "$fmt" "--------------------------------------------" "----------------------" "----------------------" "--------"
  row() { printf "$fmt" "$1" "$(shown "S:$2" "$3")" "$(shown "N:$2" "$3")" "$(ratio "$(med "N:$2")" "$(med "S:$2")")"; }
  row "memory per person (B, used_memory)" mem 1
  row "fill through ENTER (people/s)" fill 0
  row "QUEUE.ENTER server time (us/call)" enter_us 2
  row "QUEUE.ENTER client (requests/s)" enter_rps 0
  row "QUEUE.STATUS server time (us/call)" status_us 2
  [ "$B" = module ] && row "  its nested ZRANK (us/call)" status_zrank_us 2
  row "QUEUE.STATUS client (requests/s)" status_rps 0
  row "QUEUE.PROMOTE MAX 1000 server time (us)" promote_us 0
  row "whole line, QUEUE.LINE pages of 10000 (ms)" line_ms 1
  row "  the same, wall time at the client (ms)" line_wall_ms 0
  if [ -n "$QUEUE_API" ]; then
    row "queue-api start until /healthz up (ms)" api_start_ms 0
    row "  Valkey time of its start (us)" api_start_vus 0
    row "first status of one person, wall (ms)" api_status_ms 2
    row "  its Valkey time (us)" api_status_vus 0
    row "first push stream event, wall (ms)" api_stream_ms 1
    row "  its Valkey time (us)" api_stream_vus 0
  fi
  local fmt2='%-44s %22s\n'
  printf "$fmt2" "at N only" ""
  printf "$fmt2" "BGSAVE, wall (s) (RDB ${R[N:rdb_mb]:-NA} MB)" "$(shown N:bgsave_s 2)"
  printf "$fmt2" "BGREWRITEAOF, wall (s) (AOF ${R[N:aof_mb]:-NA} MB)" "$(shown N:aof_s 2)"
  printf "$fmt2" "restart from RDB until PING (s)" "$(shown N:restart_rdb_s 2)"
  printf "$fmt2" "restart from AOF until PING (s)" "$(shown N:restart_aof_s 2)"
  printf "$fmt2" "new replica until in sync (s)" "$(shown N:replica_s 2)"
}

run_backend() {
  B=$1
  R=()
  log "backend $B: SMALL=$SMALL N=$N ROUNDS=$ROUNDS"
  # SMALL, on a fresh server
  start_server "$B-small" "$TMP/$B-small" || return 1
  PORT=$SPORT; SPID_MAIN=$SPID
  load_lua "$PORT" || return 1
  # soft_cap 0 while filling (else ENTER admits at once), then room for the PROMOTEs;
  # ticket_ttl an hour: no ticket expires between rounds, so a PROMOTE times
  # promotion alone, not the removal of the tickets an earlier round issued
  config_queue "$PORT" small soft_cap 0 abandon_after 0 batch_max 100000 ticket_ttl 3600000
  fill "$PORT" small "$SMALL" S
  config_queue "$PORT" small soft_cap 10000000
  if [ "$PROFILE" = 1 ]; then
    profile "$PORT" "$SPID_MAIN" small "$SMALL" S
  else
    for _ in $(seq 1 "$ROUNDS"); do api_round "$PORT" small "$SMALL" S; done
    measure "$PORT" small "$SMALL" S
  fi
  stop_server "$PORT" "$SPID_MAIN"; rm -rf "$TMP/$B-small"
  # N, on another fresh server
  start_server "$B-big" "$TMP/$B-big" || return 1
  PORT=$SPORT; SPID_MAIN=$SPID
  load_lua "$PORT" || return 1
  config_queue "$PORT" big soft_cap 0 abandon_after 0 batch_max 100000 ticket_ttl 3600000
  fill "$PORT" big "$N" N
  config_queue "$PORT" big soft_cap 10000000
  if [ "$PROFILE" = 1 ]; then
    profile "$PORT" "$SPID_MAIN" big "$N" N
    stop_server "$PORT" "$SPID_MAIN"; rm -rf "$TMP/$B-big"
    return 0
  fi
  for _ in $(seq 1 "$ROUNDS"); do api_round "$PORT" big "$N" N; done
  measure "$PORT" big "$N" N
  persistence big
  stop_server "$PORT" "$SPID_MAIN"
  rm -rf "$TMP/$B-big"
  report | tee -a "$TMP/report"
}

log "ten-million: BACKEND=$BACKEND N=$N SMALL=$SMALL ROUNDS=$ROUNDS STATUS_REQS=$STATUS_REQS ENTER_REQS=$ENTER_REQS"
for b in "${BACKENDS[@]}"; do
  run_backend "$b" || fail "backend $b stopped early"
done
echo
echo "ten-million: $(( $(date +%s) - T_START ))s in all"
if [ -s "$TMP/failures" ]; then
  echo "FAILED steps:"
  sed 's/^/  - /' "$TMP/failures"
  exit 1
fi
echo "every step passed (fills complete, restarts and replicas with the same people)"
exit 0

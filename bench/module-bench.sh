#!/usr/bin/env bash
# module-bench.sh -- benchmark the valkey-queue module against bare Valkey commands,
# side by side in one run, and print figures, ratios and targets.
#
#   bench/module-bench.sh                                  # defaults (~1.5-3 min on 2 cores)
#   ROUNDS=1 N=50000 MEM_USERS=100000 bench/module-bench.sh   # quick run
#
# Environment:
#   MODULE        module .so (default: <repo>/target/release/libvalkey_queue.so)
#   ROUNDS        interleaved throughput rounds, median taken          (default 5)
#   N             requests per valkey-benchmark run                    (default 200000)
#   CLIENTS       valkey-benchmark -c                                  (default 50)
#   PIPELINE      valkey-benchmark -P                                  (default 16)
#   STATUS_USERS  members pre-filled for STATUS vs ZRANK               (default 100000)
#   PROMOTE_USERS waiting users for PROMOTE vs ZPOPMIN (kept >= this)  (default 100000)
#   PROMOTE_REPS  timed PROMOTE / ZPOPMIN calls, median taken          (default 9)
#   MEM_USERS     users for the memory figure                          (default 1000000)
#   RANKS_USERS   waiting users for the whole-line rank refresh        (default 1000000)
#   BACKEND       module (default) | lua  -- lua is a hook, not working yet (see qcmd)
#                 | none: load nothing (tests the script itself; QUEUE.* sides error)
#   LUA_LIB       Lua library for BACKEND=lua (default <repo>/lua-fallback/queue.lua)
#   VALKEY_SERVER / VALKEY_BENCHMARK  binaries (default: from PATH)
#   KEEP_TMP=1    keep the temp dir (server logs) for debugging
#
# It starts its own valkey-server child process (not daemonized) on a free
# 127.0.0.1 port with a temp dir, and kills it on exit. It is a report, not a
# test: it exits 0 whatever the PASS/FAIL verdicts (non-zero only when it cannot
# run at all, e.g. the module is missing or the server does not start).
set -uo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
LIB="$SCRIPT_DIR/lib/benchlib.py"

MODULE=${MODULE:-$REPO_ROOT/target/release/libvalkey_queue.so}
ROUNDS=${ROUNDS:-5}
N=${N:-200000}
CLIENTS=${CLIENTS:-50}
PIPELINE=${PIPELINE:-16}
STATUS_USERS=${STATUS_USERS:-100000}
PROMOTE_USERS=${PROMOTE_USERS:-100000}
PROMOTE_REPS=${PROMOTE_REPS:-9}
PROMOTE_MAX=1000
MEM_USERS=${MEM_USERS:-1000000}
RANKS_USERS=${RANKS_USERS:-1000000}
BACKEND=${BACKEND:-module}
LUA_LIB=${LUA_LIB:-$REPO_ROOT/lua-fallback/queue.lua}
VALKEY_SERVER=${VALKEY_SERVER:-valkey-server}
VALKEY_BENCHMARK=${VALKEY_BENCHMARK:-valkey-benchmark}
PY=${PYTHON:-python3}
export BACKEND

HOST=127.0.0.1
PORT=""
SERVER_PID=""
SERVER_COUNT=0
SERVER_LOG=""
TMPDIR_BENCH=$(mktemp -d "${TMPDIR:-/tmp}/module-bench.XXXXXX")
T_START=$(date +%s)
ERRFILE="$TMPDIR_BENCH/errors"   # human-readable problems, printed after the table
: >"$ERRFILE"

log()  { printf '[%4ds] %s\n' "$(( $(date +%s) - T_START ))" "$*" >&2; }
# (a file, not an array: note_error is also called inside $(...) subshells)
note_error() { printf '%s\n' "$*" >>"$ERRFILE"; log "ERROR: $*"; }
NOTEFILE="$TMPDIR_BENCH/notes"; : >"$NOTEFILE"
note() { printf '%s\n' "$*" >>"$NOTEFILE"; log "note: $*"; }

# ---------------------------------------------------------------- server life
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SERVER_PID" 2>/dev/null && kill -9 "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  SERVER_PID=""
}
cleanup() {
  stop_server
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $TMPDIR_BENCH" >&2; else rm -rf "$TMPDIR_BENCH"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts a fresh server (stopping the previous one) with the module or Lua library.
start_server() {
  stop_server
  local attempt log
  for attempt in 1 2 3; do
    PORT=$("$PY" "$LIB" freeport) || { echo "cannot pick a free port" >&2; exit 2; }
    SERVER_COUNT=$((SERVER_COUNT + 1))
    log="$TMPDIR_BENCH/valkey-$SERVER_COUNT.log"
    SERVER_LOG=$log
    local load=()
    [ "$BACKEND" = module ] && load=(--loadmodule "$MODULE")
    "$VALKEY_SERVER" --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$TMPDIR_BENCH" --logfile "$log" "${load[@]}" &
    SERVER_PID=$!
    for _ in $(seq 1 100); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      if [ "$("$PY" "$LIB" call "$PORT" PING 2>/dev/null)" = "reply=True" ]; then
        load_backend
        return 0
      fi
      sleep 0.1
    done
    echo "valkey-server did not come up on port $PORT (attempt $attempt); log tail:" >&2
    tail -n 15 "$log" >&2 2>/dev/null
    stop_server
  done
  exit 2
}

# If the server died during a phase (crash, or killed from outside), note how and
# start a fresh one so the remaining phases still run.
check_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill -0 "$SERVER_PID" 2>/dev/null && return 0
  wait "$SERVER_PID" 2>/dev/null
  local st=$?
  note_error "valkey-server pid $SERVER_PID died during '$1' (wait status $st); log tail: $(tail -n 4 "$SERVER_LOG" 2>/dev/null | tr '\n' ' ')"
  SERVER_PID=""
  start_server
}

# ------------------------------------------------------------ BACKEND HOOK
# qcmd maps a QUEUE.X command line onto the selected backend:
#   module: unchanged                 QUEUE.ENTER bq id nick
#   lua:    FCALL queue_enter 1 bq id nick
# (same mapping as to_backend() in bench/lib/benchlib.py). The Lua path is a
# hook only: LUA_LIB does not exist yet and nothing here has been run with it.
qcmd() {
  if [ "$BACKEND" = lua ] && [[ "${1^^}" == QUEUE.* ]]; then
    local name=${1#*.}
    shift
    echo "FCALL queue_${name,,} 1 $*"
  else
    echo "$*"
  fi
}
load_backend() {
  [ "$BACKEND" = lua ] || return 0
  # Hook: load the Lua library into the fresh server (FUNCTION LOAD REPLACE).
  if [ ! -f "$LUA_LIB" ]; then echo "BACKEND=lua: $LUA_LIB not found" >&2; exit 2; fi
  valkey-cli -h "$HOST" -p "$PORT" -x FUNCTION LOAD REPLACE < "$LUA_LIB" >/dev/null \
    || { echo "BACKEND=lua: FUNCTION LOAD failed" >&2; exit 2; }
}
# -------------------------------------------------------- end BACKEND HOOK

py()   { "$PY" "$LIB" "$@"; }
kv()   { sed -n "s/^$1=//p" <<<"$2" | head -n1; }   # kv KEY "$output" (one key=value a line)

# Sets queue config fields one at a time (so one bad field does not hide the rest).
qconfig() {
  local key=$1; shift
  while [ $# -ge 2 ]; do
    local out
    out=$(py config "$PORT" "$key" "$1" "$2") \
      || note_error "$(kv error "$out")"
    shift 2
  done
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "NA"; exit} if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

# Runs valkey-benchmark for one command; prints requests/second or "NA".
# Errors (non-zero exit, "Error from server", error-reply counter moving) are noted.
bench_rps() {
  local label=$1 keyspace=$2; shift 2
  local out rc errs0 errs1 rps
  errs0=$(py errors "$PORT"); [[ $errs0 =~ ^[0-9]+$ ]] || errs0=-1
  # shellcheck disable=SC2046
  out=$("$VALKEY_BENCHMARK" -h "$HOST" -p "$PORT" -c "$CLIENTS" -P "$PIPELINE" -n "$N" \
        -r "$keyspace" -q $(qcmd "$@") 2>&1 | tr '\r' '\n')
  rc=$?
  errs1=$(py errors "$PORT"); [[ $errs1 =~ ^[0-9]+$ ]] || errs1=-2   # -2: server unreachable
  rps=$(grep -E 'requests per second' <<<"$out" | tail -n1 | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/')
  if [ "$rc" -ne 0 ] || [ -z "$rps" ] || [ "$errs1" != "$errs0" ]; then
    local delta="+$(( errs1 - errs0 ))"
    [ "$errs0" -lt 0 ] || [ "$errs1" -lt 0 ] && delta="unknown (server unreachable)"
    note_error "$label: valkey-benchmark rc=$rc, server error replies $delta: $(grep -m1 -E 'Error|ERR|WRONG' <<<"$out" || tail -n1 <<<"$out")"
    echo NA
  else
    echo "$rps"
  fi
}

# side_by_side A B "KEYSPACE COMMAND ARGS..." "KEYSPACE COMMAND ARGS...": ROUNDS
# rounds of the two commands, one after the other in each round; sets A_RPS and B_RPS
# (requests/second per round) and A_MED and B_MED (their medians) for the names A, B.
side_by_side() {
  local -n a_rps=${1}_RPS b_rps=${2}_RPS a_med=${1}_MED b_med=${2}_MED
  local -a a b
  read -ra a <<<"$3"; read -ra b <<<"$4"
  local i x y
  a_rps=(); b_rps=()
  for i in $(seq 1 "$ROUNDS"); do
    x=$(bench_rps "${a[1]}" "${a[@]}")
    y=$(bench_rps "${b[1]}" "${b[@]}")
    a_rps+=("$x"); b_rps+=("$y")
    log "round $i: ${a[1]} $x rps | ${b[1]} $y rps"
  done
  a_med=$(printf '%s\n' "${a_rps[@]}" | grep -E '^[0-9.]+$' | median)
  b_med=$(printf '%s\n' "${b_rps[@]}" | grep -E '^[0-9.]+$' | median)
}

# memory_per_user MEM RSS KIND KEY SIDE COMMAND: MEM_USERS users put with COMMAND
# into a KIND (queue or zset) at KEY on the current server; sets MEM and RSS (bytes
# per user, NA when unknown) and logs the growth under SIDE.
memory_per_user() {
  local -n mem=$1 rss=$2
  local out
  if out=$(py mem "$PORT" "$3" "$4" "$MEM_USERS"); then
    mem=$(kv bytes_per_user "$out"); rss=$(kv rss_bytes_per_user "$out")
    mem=${mem:-NA}; rss=${rss:-NA}
  else
    note_error "memory ($6): $(kv error "$out")"
  fi
  log "$(printf '%-7s' "$5:") $MEM_USERS users in $(kv seconds "$out")s, used_memory +$(kv used_delta "$out") B, rss +$(kv rss_delta "$out") B"
}

ratio() {  # ratio A B -> A/B with 3 decimals, NA if either is missing
  awk -v a="$1" -v b="$2" 'BEGIN { if (a=="NA" || b=="NA" || a=="" || b=="" || b+0==0) print "NA"; else printf "%.3f\n", a/b }'
}
verdict() {  # verdict VALUE OP LIMIT
  awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN {
    if (v=="NA" || v=="") { print "FAIL"; exit }
    ok = (op==">=") ? (v+0 >= l+0) : (v+0 <= l+0); print ok ? "PASS" : "FAIL" }'
}

# ---------------------------------------------------------------- preflight
case "$BACKEND" in module|lua|none) ;; *) echo "BACKEND must be module, lua or none" >&2; exit 2;; esac
if [ "$BACKEND" = module ] && [ ! -f "$MODULE" ]; then
  echo "module not found: $MODULE (build it with cargo build --release, or set MODULE=...)" >&2
  exit 2
fi
for b in "$VALKEY_SERVER" "$VALKEY_BENCHMARK"; do
  command -v "$b" >/dev/null || { echo "$b not found" >&2; exit 2; }
done
"$PY" -c 'import valkey' 2>/dev/null || "$PY" -m pip install -q valkey >/dev/null 2>&1 \
  || "$PY" -m pip install -q --break-system-packages valkey >/dev/null 2>&1 || true
"$PY" -c 'import valkey' 2>/dev/null || { echo "python package 'valkey' missing and could not be installed (pip install valkey)" >&2; exit 2; }

if [ "$BACKEND" = lua ] && [ ! -f "$LUA_LIB" ]; then
  echo "BACKEND=lua: $LUA_LIB not found (set LUA_LIB=...)" >&2; exit 2
fi
case "$BACKEND" in
  module) log "backend=module MODULE=$MODULE" ;;
  lua)    log "backend=lua LUA_LIB=$LUA_LIB (hook, untested)" ;;
  none)   log "backend=none (no module loaded: QUEUE.* sides will error)" ;;
esac
log "ROUNDS=$ROUNDS N=$N CLIENTS=$CLIENTS PIPELINE=$PIPELINE STATUS_USERS=$STATUS_USERS PROMOTE_USERS=$PROMOTE_USERS PROMOTE_REPS=$PROMOTE_REPS MEM_USERS=$MEM_USERS"
log "$("$VALKEY_SERVER" --version)"

# ===================================================== 1. ENTER vs ZADD (rps)
start_server
log "server pid=$SERVER_PID port=$PORT"
side_by_side ENTER ZADD "100000000 QUEUE.ENTER bq __rand_int__ nick0001" "100000000 ZADD bz __rand_int__ __rand_int__"
check_server "ENTER vs ZADD"

# ============== 1b. ENTER with an access code, ENTER into a second lane (rps)
# Interleaved with plain ENTER in each round, on fresh keys: queue bq (one lane), bl
# (lanes presale,general: ENTER ... LANE general, the second lane) and bc (the same
# lanes: ENTER ... CODE h, a code of presale with a million uses, given back before
# each round). Nobody waits in a later lane than the one entered, so no entry
# writes to the change log: what is measured is the lane's numbering and the code.
py call "$PORT" FLUSHALL >/dev/null
qconfig bl lanes presale,general
qconfig bc lanes presale,general
BENCH_CODE=$(printf 'c%.0s' $(seq 1 64))
# Besides the client's requests/second (which other work on the machine blurs), the
# server's own time per call: INFO commandstats usec_per_call, reset before each run.
usec_per_call() {  # usec_per_call COMMAND -> the server's usec per call since the reset
  valkey-cli -h "$HOST" -p "$PORT" INFO commandstats 2>/dev/null | tr -d '\r' \
    | sed -n "s/^cmdstat_$1:.*usec_per_call=\([0-9.]*\).*/\1/p"
}
PLAIN_RPS=(); LANE_RPS=(); CODE_RPS=(); PLAIN_US=(); LANE_US=(); CODE_US=()
ENTER_STAT=queue.enter; [ "$BACKEND" = lua ] && ENTER_STAT=fcall
for i in $(seq 1 "$ROUNDS"); do
  py call "$PORT" QUEUE.CODES bc REMOVE "$BENCH_CODE" >/dev/null
  out=$(py call "$PORT" QUEUE.CODES bc ADD presale 1000000 "$BENCH_CODE") \
    || note_error "QUEUE.CODES ADD: $out"
  py call "$PORT" CONFIG RESETSTAT >/dev/null
  x=$(bench_rps ENTER 100000000 QUEUE.ENTER bq __rand_int__ nick0001); xu=$(usec_per_call "$ENTER_STAT")
  py call "$PORT" CONFIG RESETSTAT >/dev/null
  y=$(bench_rps "ENTER LANE" 100000000 QUEUE.ENTER bl __rand_int__ nick0001 LANE general); yu=$(usec_per_call "$ENTER_STAT")
  py call "$PORT" CONFIG RESETSTAT >/dev/null
  z=$(bench_rps "ENTER CODE" 100000000 QUEUE.ENTER bc __rand_int__ nick0001 CODE "$BENCH_CODE"); zu=$(usec_per_call "$ENTER_STAT")
  PLAIN_RPS+=("$x"); LANE_RPS+=("$y"); CODE_RPS+=("$z")
  PLAIN_US+=("${xu:-NA}"); LANE_US+=("${yu:-NA}"); CODE_US+=("${zu:-NA}")
  log "round $i: ENTER $x rps ${xu:-NA} us/call | ENTER LANE $y rps ${yu:-NA} us/call | ENTER CODE $z rps ${zu:-NA} us/call"
done
PLAIN_USM=$(printf '%s\n' "${PLAIN_US[@]}" | grep -E '^[0-9.]+$' | median)
LANE_USM=$(printf '%s\n' "${LANE_US[@]}" | grep -E '^[0-9.]+$' | median)
CODE_USM=$(printf '%s\n' "${CODE_US[@]}" | grep -E '^[0-9.]+$' | median)
PLAIN_MED=$(printf '%s\n' "${PLAIN_RPS[@]}" | grep -E '^[0-9.]+$' | median)
LANE_MED=$(printf '%s\n' "${LANE_RPS[@]}" | grep -E '^[0-9.]+$' | median)
CODE_MED=$(printf '%s\n' "${CODE_RPS[@]}" | grep -E '^[0-9.]+$' | median)
check_server "ENTER with lanes and codes"

# ==================================================== 2. STATUS vs ZRANK (rps)
# Fresh keys with the same STATUS_USERS members 000000000000..; valkey-benchmark
# -r STATUS_USERS then draws ids from exactly that range, so every lookup hits.
py call "$PORT" FLUSHALL >/dev/null
# abandon_after 0: nobody is dropped; soft_cap 0: nobody is admitted on ENTER, so
# every STATUS looks up a waiting user (the rank path that ZRANK is compared to).
qconfig bq abandon_after 0 soft_cap 0
out=$(py fill "$PORT" queue bq "$STATUS_USERS") || note_error "STATUS fill (QUEUE.ENTER): $(kv error "$out")"
log "queue bq: $(kv filled "$out") entered in $(kv seconds "$out")s"
out=$(py fill "$PORT" zset bz "$STATUS_USERS") || note_error "STATUS fill (ZADD): $(kv error "$out")"
log "zset  bz: $(kv filled "$out") added in $(kv seconds "$out")s"
log "QUEUE.INFO bq -> $(valkey-cli -h $HOST -p "$PORT" $(qcmd QUEUE.INFO bq) 2>&1 | tr '\n' ' ' | cut -c1-300)"
side_by_side STATUS ZRANK "$STATUS_USERS QUEUE.STATUS bq __rand_int__" "$STATUS_USERS ZRANK bz __rand_int__"
check_server "STATUS vs ZRANK"

# ================================== 3. PROMOTE MAX 1000 vs ZPOPMIN 1000 (usec)
py call "$PORT" FLUSHALL >/dev/null
PROMOTE_FILL=$(( PROMOTE_USERS + PROMOTE_REPS * PROMOTE_MAX ))   # stays >= PROMOTE_USERS
# Fill with soft_cap 0 (ENTER admits at once while there is room, so a big soft_cap
# during the fill would let everybody in), then open the gate for the timed PROMOTEs.
qconfig bp soft_cap 0 batch_max 100000 abandon_after 0
out=$(py fill "$PORT" queue bp "$PROMOTE_FILL") || note_error "PROMOTE fill (QUEUE.ENTER): $(kv error "$out")"
log "queue bp: $(kv filled "$out") entered in $(kv seconds "$out")s"
# soft_cap only has to exceed what the timed PROMOTEs issue (PROMOTE_REPS * 1000);
# if the module caps the field below 100000000, fall back to 10000000.
if ! out=$(py config "$PORT" bp soft_cap 100000000); then
  note "$(kv error "$out"); used soft_cap 10000000 instead"
  qconfig bp soft_cap 10000000
fi
out=$(py fill "$PORT" zset bz2 "$PROMOTE_FILL") || note_error "PROMOTE fill (ZADD): $(kv error "$out")"
log "zset bz2: $(kv filled "$out") added in $(kv seconds "$out")s"
log "QUEUE.INFO bp -> $(valkey-cli -h $HOST -p "$PORT" $(qcmd QUEUE.INFO bp) 2>&1 | tr '\n' ' ' | cut -c1-300)"
PROMOTE_US=NA; ZPOPMIN_US=NA
out=$(py servertime "$PORT" "$PROMOTE_REPS" bp bz2 "$PROMOTE_MAX")
PROMOTE_US=$(kv promote_median "$out"); ZPOPMIN_US=$(kv zpopmin_median "$out")
PROMOTE_US=${PROMOTE_US:-NA}; ZPOPMIN_US=${ZPOPMIN_US:-NA}
log "QUEUE.PROMOTE usec: $(kv promote_usec "$out") (last reply $(kv promote_last_reply "$out"))"
log "ZPOPMIN       usec: $(kv zpopmin_usec "$out") (last reply $(kv zpopmin_last_reply "$out"))"
sed -n 's/^error=/server time: /p' <<<"$out" | while IFS= read -r e; do note_error "$e"; done
sed -n 's/^warning=/server time: /p' <<<"$out" | while IFS= read -r e; do note "$e"; done
check_server "PROMOTE vs ZPOPMIN"

# ============================================ 4. memory per waiting user (bytes)
# Each side on a fresh server so used_memory_rss deltas are comparable too.
MEM_Q=NA; MEM_Z=NA; RSS_Q=NA; RSS_Z=NA
start_server
qconfig bm soft_cap 0 abandon_after 0
memory_per_user MEM_Q RSS_Q queue bm module QUEUE.ENTER
log "QUEUE.INFO bm -> $(valkey-cli -h $HOST -p "$PORT" $(qcmd QUEUE.INFO bm) 2>&1 | tr '\n' ' ' | cut -c1-300)"
check_server "memory (module)"
start_server
memory_per_user MEM_Z RSS_Z zset bmz zset ZADD
check_server "memory (zset)"
stop_server

# used_memory only counts what goes through the server allocator (RedisModule_Alloc);
# if RSS grew much more than used_memory, the module likely allocates elsewhere.
# Whole-line rank refresh: QUEUE.LINE pages (the push path) vs QUEUE.RANKS of everyone.
LINE_NS=NA; RANKS_NS=NA; ZRANK_NS=NA; LINE_MS=NA
start_server
qconfig br soft_cap 0 abandon_after 0
out=$(py fill "$PORT" queue br "$RANKS_USERS") || note_error "ranks fill (QUEUE.ENTER): $(kv error "$out")"
log "queue br: $(kv filled "$out") entered in $(kv seconds "$out")s"
if out=$(py ranks "$PORT" br "$RANKS_USERS" 10000); then
  LINE_NS=$(kv line_ns_per_user "$out"); RANKS_NS=$(kv ranks_ns_per_user "$out"); ZRANK_NS=$(kv zrank_ns_per_user "$out")
  LINE_MS=$(kv line_ms "$out")
  log "QUEUE.LINE: $(kv line_calls "$out") calls, $(kv line_users "$out") users, $LINE_MS ms server time ($(kv line_wall_ms "$out") ms wall)"
  log "QUEUE.RANKS: $(kv ranks_ms "$out") ms server time ($(kv ranks_wall_ms "$out") ms wall); ZRANK $ZRANK_NS ns/user"
else
  note_error "ranks: $(kv error "$out")"
fi
check_server "whole-line ranks"
stop_server

if awk -v u="$MEM_Q" -v r="$RSS_Q" 'BEGIN { exit !(u != "NA" && r != "NA" && r+0 > 1.5*u + 50) }'; then
  note "module memory: rss grew $RSS_Q B/user but used_memory only $MEM_Q B/user -- the module may allocate outside RedisModule_Alloc, so used_memory undercounts it"
fi

# ====================================================================== report
R1=$(ratio "$ENTER_MED" "$ZADD_MED");    V1=$(verdict "$R1" '>=' 0.9)
R2=$(ratio "$STATUS_MED" "$ZRANK_MED");  V2=$(verdict "$R2" '>=' 0.8)
R3=$(ratio "$PROMOTE_US" "$ZPOPMIN_US"); V3=$(verdict "$R3" '<=' 2.0)
R4=$(ratio "$MEM_Q" "$MEM_Z");           V4=$(verdict "$MEM_Q" '<=' 200)
R5=$(ratio "$LINE_NS" "$ZRANK_NS");      V5=$(verdict "$LINE_NS" '<=' 200)
R6=$(ratio "$RANKS_NS" "$ZRANK_NS")
R7=$(ratio "$LANE_MED" "$PLAIN_MED");    V7=$(verdict "$R7" '>=' 0.8)
R8=$(ratio "$CODE_MED" "$PLAIN_MED");    V8=$(verdict "$R8" '>=' 0.8)
R9=$(ratio "$PLAIN_USM" "$LANE_USM")      # server time: plain / lane = lane's relative throughput
R10=$(ratio "$PLAIN_USM" "$CODE_USM")

echo
echo "valkey-queue module benchmark ($("$VALKEY_SERVER" --version | grep -oE 'v=[^ ]+'), backend=$BACKEND, $(nproc) cores, $(( $(date +%s) - T_START ))s)"
echo "ROUNDS=$ROUNDS N=$N -c $CLIENTS -P $PIPELINE STATUS_USERS=$STATUS_USERS PROMOTE_USERS=$PROMOTE_USERS PROMOTE_REPS=$PROMOTE_REPS MEM_USERS=$MEM_USERS RANKS_USERS=$RANKS_USERS"
echo "per-round rps: ENTER ${ENTER_RPS[*]} | ZADD ${ZADD_RPS[*]}"
echo "per-round rps: ENTER ${PLAIN_RPS[*]} | ENTER LANE ${LANE_RPS[*]} | ENTER CODE ${CODE_RPS[*]} (us/call: ${PLAIN_US[*]} | ${LANE_US[*]} | ${CODE_US[*]})"
echo "per-round rps: STATUS ${STATUS_RPS[*]} | ZRANK ${ZRANK_RPS[*]}"
echo "rss B/user (informative): module $RSS_Q | zset $RSS_Z"
echo
fmt='%-36s %14s %14s %8s %-16s %s\n'
printf "$fmt" "measurement" "module" "bare" "ratio" "target" "result"
printf "$fmt" "------------------------------------" "--------------" "--------------" "--------" "----------------" "------"
printf "$fmt" "QUEUE.ENTER vs ZADD (rps, median)"      "$ENTER_MED"   "$ZADD_MED"    "$R1" "ratio >= 0.9" "$V1"
printf "$fmt" "ENTER LANE (2nd lane) vs ENTER (rps)"   "$LANE_MED"    "$PLAIN_MED"   "$R7" "ratio >= 0.8" "$V7"
printf "$fmt" "ENTER CODE vs ENTER (rps)"              "$CODE_MED"    "$PLAIN_MED"   "$R8" "ratio >= 0.8" "$V8"
printf "$fmt" "ENTER LANE server us/call (plain/it)"   "$LANE_USM"    "$PLAIN_USM"   "$R9" "(informative)" "-"
printf "$fmt" "ENTER CODE server us/call (plain/it)"   "$CODE_USM"    "$PLAIN_USM"   "$R10" "(informative)" "-"
printf "$fmt" "QUEUE.STATUS vs ZRANK (rps, median)"    "$STATUS_MED"  "$ZRANK_MED"   "$R2" "ratio >= 0.8" "$V2"
printf "$fmt" "PROMOTE MAX 1000 vs ZPOPMIN 1000 (us)"  "$PROMOTE_US"  "$ZPOPMIN_US"  "$R3" "ratio <= 2.0" "$V3"
printf "$fmt" "memory per waiting user (B, used_mem)"  "$MEM_Q"       "$MEM_Z"       "$R4" "module <= 200" "$V4"
printf "$fmt" "whole line via QUEUE.LINE (ns/user)"    "$LINE_NS"     "$ZRANK_NS"    "$R5" "module <= 200" "$V5"
printf "$fmt" "whole line via QUEUE.RANKS (ns/user)"   "$RANKS_NS"    "$ZRANK_NS"    "$R6" "(old path)" "-"
if [ -s "$NOTEFILE" ]; then
  echo
  echo "notes:"
  sed 's/^/  - /' "$NOTEFILE"
fi
if [ -s "$ERRFILE" ]; then
  echo
  echo "errors:"
  sed 's/^/  - /' "$ERRFILE"
fi
exit 0

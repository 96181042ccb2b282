#!/usr/bin/env bash
# Claims per second through ONE gate instance and ONE chat-server instance, with durable
# claims off and on (--durable-replicas 1: WAIT 1 after the claim), and the latency of
# a claim through each (p50, p99). One valkey-server primary with the module and one
# replica on loopback; four services side by side (the gate and chat-server, each
# once without and once with --durable-replicas 1). Each round, for each service,
# both modes run one after the other, the order swapped from round to round; each
# run gets a queue of its own with CLAIMS tickets minted beforehand straight in
# Valkey (QUEUE.ENTER of every user into the paused queue, then QUEUE.PROMOTE), then
# `queue-cli claim-rate` claims them CONC at a time:
#   gate:        GET /gate/claim?queue=&ticketId=   (admitted: the cookie is set)
#   chat-server: GET /gameserver?ticketId=&queue=&holder=   (the WebSocket handshake,
#                which claims before the upgrade; the socket closed right after)
# Only the claims are timed. Prints each run, then the median over the rounds with
# the spread (min..max). Each run also checks the mode it measured: the primary's
# WAIT count (INFO commandstats) grows in a durable run and stays put otherwise.
#
#   bash bench/claim-rate.sh                     # 5 rounds, 2000 claims, 32 at once
#   REDUCED=1 bash bench/claim-rate.sh           # 3 rounds of 1000 claims
#   ROUNDS=7 CLAIMS=5000 CONC=64 bash bench/claim-rate.sh
#   DURABLE_TIMEOUT_MS=1000 bash bench/claim-rate.sh   # the services' --durable-timeout-ms (200)
#
# Runs after `bash scripts/install-deps.sh` and `cargo build --release` (builds what
# it needs when missing). Starts everything on free loopback ports; stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. bench/lib/valkey.sh

ROUNDS=${ROUNDS:-5}
CLAIMS=${CLAIMS:-2000}
CONC=${CONC:-32}
DURABLE_TIMEOUT_MS=${DURABLE_TIMEOUT_MS:-200}
if [ -n "${REDUCED:-}" ]; then ROUNDS=3; CLAIMS=1000; fi
command -v valkey-server >/dev/null 2>&1 || bash scripts/install-deps.sh
[ -f target/release/libvalkey_queue.so ] || cargo build --release -q -p valkey-queue
[ -x target/release/queue-gate ] || cargo build --release -q -p queue-gate
[ -x target/release/chat-server ] || cargo build --release -q -p chat-server
[ -x target/release/queue-cli ] || cargo build --release -q -p queue-cli
ulimit -n 65536 2>/dev/null || true

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kill "${vpid:-}" "${rpid:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "${dir:-}" "${rdir:-}"
}
trap cleanup EXIT

# The primary (with the module), and its replica (with the module too: it loads the
# module's data from the primary).
start_valkey
url="redis://127.0.0.1:$vport/"
rdir=$(mktemp -d); rport=$(port)
valkey-server --port "$rport" --bind 127.0.0.1 --save '' --dir "$rdir" --logfile "$rdir/valkey.log" \
  --loadmodule "$root/target/release/libvalkey_queue.so" --replicaof 127.0.0.1 "$vport" & rpid=$!
wait_valkey "$rport" || { echo "the replica did not start (see $rdir/valkey.log)" >&2; exit 1; }
for _ in $(seq 100); do
  valkey-cli -p "$rport" INFO replication | tr -d '\r' | grep -q '^master_link_status:up' && break
  sleep 0.1
done
valkey-cli -p "$rport" INFO replication | tr -d '\r' | grep -q '^master_link_status:up' \
  || { echo "the replica did not sync with the primary (see $rdir/valkey.log)" >&2; exit 1; }

wait_http() { # url
  for _ in $(seq 200); do curl -sf -o /dev/null "$1" && return 0; sleep 0.05; done
  echo "$1 did not answer" >&2; return 1
}
durable=(--durable-replicas 1 --durable-timeout-ms "$DURABLE_TIMEOUT_MS")
target/release/queue-gate --write-key "$dir/key.pem" >/dev/null
# The gate in forward-auth mode (no upstream: only /gate/claim is asked for).
gate_flags=(--valkey-url "$url" --key "$dir/key.pem" --route /app=claim-rate)
declare -A svc_url
for mode in off on; do
  extra=(); [ "$mode" = on ] && extra=("${durable[@]}")
  p=$(port)
  RUST_LOG=warn target/release/queue-gate "${gate_flags[@]}" "${extra[@]}" --listen "127.0.0.1:$p" \
    >"$dir/gate-$mode.log" 2>&1 & pids+=($!)
  svc_url[gate-$mode]="http://127.0.0.1:$p"
  p=$(port)
  RUST_LOG=warn target/release/chat-server --valkey-url "$url" "${extra[@]}" --listen "127.0.0.1:$p" \
    --max-sessions 100000 --max-sessions-per-addr 0 >"$dir/chat-$mode.log" 2>&1 & pids+=($!)
  svc_url[chat-$mode]="http://127.0.0.1:$p"
done
for mode in off on; do
  wait_http "${svc_url[gate-$mode]}/gate/healthz"
  wait_http "${svc_url[chat-$mode]}/healthz"
done

waits() { valkey-cli -p "$vport" INFO commandstats | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_wait" {print $3}' | grep . || echo 0; }

echo "claim rate through one gate and one chat-server ($(nproc) cores, valkey $(valkey-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2)," \
  "$ROUNDS rounds of $CLAIMS claims, $CONC at once, --durable-timeout-ms $DURABLE_TIMEOUT_MS)"
results="$dir/rounds.txt"
: >"$results"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="off on"; else order="on off"; fi
  for svc in gate chat; do
    for mode in $order; do
      w0=$(waits)
      line=$(target/release/queue-cli claim-rate --service "$svc" --url "${svc_url[$svc-$mode]}" \
        --valkey-url "$url" --queue "cr-$r-$svc-$mode" --claims "$CLAIMS" --conc "$CONC") \
        || { echo "round $r, $svc durable $mode: $line" >&2; exit 1; }
      w1=$(waits)
      if [ "$mode" = on ] && [ "$w1" = "$w0" ]; then echo "round $r: $svc with durable claims sent no WAIT" >&2; exit 1; fi
      if [ "$mode" = off ] && [ "$w1" != "$w0" ]; then echo "round $r: $svc without durable claims sent WAIT" >&2; exit 1; fi
      # "claim-rate: claims N secs S per_sec R p50_us A p99_us B max_us C admitted .. not_durable .."
      set -- $line
      echo "$r $svc $mode $7 ${9} ${11} ${17}" >>"$results"
      printf 'round %d: %-5s durable %-3s %6.0f claims/s  p50 %5d us  p99 %6d us  not_durable %d\n' \
        "$r" "$svc" "$mode" "$7" "$9" "${11}" "${17}"
    done
  done
done

python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def show(svc, mode):
    mine = [r for r in rows if r[1] == svc and r[2] == mode]
    def col(i, fmt):
        v = [float(r[i]) for r in mine]
        return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}..{fmt.format(max(v))})"
    nd = sum(int(r[6]) for r in mine)
    name = {"gate": "gate", "chat": "chat-server"}[svc]
    print(f"  {name:<12} durable {mode:<3}  claims/s {col(3, '{:.0f}'):<22} p50 us {col(4, '{:.0f}'):<18} p99 us {col(5, '{:.0f}'):<22} not_durable {nd}")
print(f"summary over {len({r[0] for r in rows})} rounds (median, spread min..max):")
for svc in ("gate", "chat"):
    for mode in ("off", "on"):
        show(svc, mode)
PY

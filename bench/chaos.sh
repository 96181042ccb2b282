#!/usr/bin/env bash
# chaos.sh -- the chaos run: `queue-cli chaos` starts its own stack (valkey-server with
# AOF and the module, then again with the Lua library instead; two queue-managers,
# queue-api, chat-server) on free loopback
# ports, runs a swarm through it and, on a seeded schedule while people arrive,
# kills -9 and restarts each service, kills -9 Valkey and restarts it from its AOF
# (appendfsync everysec, then always, ...), and SIGSTOPs the leading queue-manager
# for longer than its lease. Prints, per fault, what users saw and how long until
# entries and promotions worked again, then the audits and the held-slots check.
# Exits non-zero when a run fails (1 an audit, 2 users unfinished or the stack did
# not come back).
#
#   bash bench/chaos.sh               # 2000 users, 3 kills per service, 3 Valkey restarts, 1 SIGSTOP
#   RUNS=2 SEED=7 bash bench/chaos.sh # two runs, seeds 7 and 8
#   REDUCED=1 bash bench/chaos.sh     # scripts/test.sh's run: 300 users, one fault of each kind
#   BACKENDS=lua bash bench/chaos.sh  # one backend only (default: "module lua")
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${REDUCED:-}" ]; then
  USERS=${USERS:-300}; RATE=${RATE:-10}; SOFT_CAP=${SOFT_CAP:-15}
  KILLS=${KILLS:-1}; VALKEY_RESTARTS=${VALKEY_RESTARTS:-2}; STOPS=${STOPS:-1}; FIRST=${FIRST:-3}
fi
USERS=${USERS:-2000}; RATE=${RATE:-20}; SOFT_CAP=${SOFT_CAP:-40}; STAY=${STAY:-2}
KILLS=${KILLS:-3}; VALKEY_RESTARTS=${VALKEY_RESTARTS:-3}; STOPS=${STOPS:-1}; FIRST=${FIRST:-5}
RUNS=${RUNS:-1}; SEED=${SEED:-1}; BACKENDS=${BACKENDS:-module lua}
command -v valkey-server >/dev/null || { echo "valkey-server not found: bash scripts/install-deps.sh" >&2; exit 2; }
# The same build as scripts/test.sh (nothing to do when it ran).
(cd "$root" && cargo build --release --workspace --all-targets)
status=0
for i in $(seq 0 $((RUNS - 1))); do
  for backend in $BACKENDS; do
    seed=$((SEED + i))
    echo "== chaos run $((i + 1)) of $RUNS, $backend (seed $seed): $USERS users at $RATE/s, soft cap $SOFT_CAP"
    rc=0
    "$root/target/release/queue-cli" chaos --users "$USERS" --rate "$RATE" --soft-cap "$SOFT_CAP" \
      --stay-secs "$STAY" --kills "$KILLS" --valkey-restarts "$VALKEY_RESTARTS" --stops "$STOPS" \
      --first-fault-secs "$FIRST" --seed "$seed" --backend "$backend" || rc=$?
    [ "$rc" -eq 0 ] || status=$rc
  done
done
exit $status

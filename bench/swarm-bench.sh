#!/usr/bin/env bash
# swarm-bench.sh -- queue-cli swarm at scale on this machine: the local stack
# (scripts/run-local.sh, its own free ports) and USERS virtual users arriving at RATE
# per second through a soft cap of SOFT_CAP, each on the whole journey (push stream or
# polling, ticket, chat, leave). Prints the swarm's report, whose first lines give the
# swarm's own CPU time and peak memory, and exits with the swarm's status.
#
#   bash bench/swarm-bench.sh                  # USERS=10000 RATE=500 SOFT_CAP=500 STAY=2
#   USERS=2000 RATE=200 bash bench/swarm-bench.sh
#
# The soft cap stays under chat-server's --max-sessions-per-addr (1000): every swarm
# user connects from 127.0.0.1, and racing users open two handshakes at once.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
USERS=${USERS:-10000}; RATE=${RATE:-500}; SOFT_CAP=${SOFT_CAP:-500}; STAY=${STAY:-2}
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
. "$root/bench/lib/valkey.sh"
trap 'kill ${stack:-} 2>/dev/null; wait ${stack:-} 2>/dev/null; rm -f "${log:-}"' EXIT
start_local_stack --soft-cap "$SOFT_CAP" || exit 2
valkey-cli -p "$VALKEY_PORT" QUEUE.CONFIG default SET ticket_ttl 10000 abandon_after 5000 >/dev/null
set +e
"$root/target/release/queue-cli" swarm --api "http://127.0.0.1:$API_PORT" --chat "http://127.0.0.1:$CHAT_PORT" \
  --users "$USERS" --rate "$RATE" --stay-secs "$STAY" --timeout-secs 600 \
  --admin-token "${ADMIN_TOKEN:-local-admin}" --quiet
rc=$?
exit $rc

#!/usr/bin/env bash
# promotion-latency.sh -- how long a freed slot stays empty, end to end: the local
# stack (scripts/run-local.sh) and a swarm whose users chat for STAY seconds and
# leave; each leave ends a session (SESSION.END), which promotes the next user inside
# that command and announces it; the swarm times free slot -> promotion seen on the
# user's push stream. Prints the swarm's report (the free slot -> promoted line is
# the figure) and exits with the swarm's status.
#
#   bash bench/promotion-latency.sh                 # USERS=2000 RATE=200 SOFT_CAP=100 STAY=2
#   BACKEND=--lua bash bench/promotion-latency.sh   # the Lua library instead of the module
#
# Everyone follows a push stream and nobody abandons (POLLING=0 ABANDON=0 by default):
# a polling user sees its promotion only at its next poll, and a ticket given to a
# closed tab holds its slot until ticket_ttl, which would time the poll interval and
# the ticket's lifetime rather than the promotion.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
USERS=${USERS:-2000}; RATE=${RATE:-200}; SOFT_CAP=${SOFT_CAP:-100}; STAY=${STAY:-2}
POLLING=${POLLING:-0}; ABANDON=${ABANDON:-0}; BACKEND=${BACKEND:-}
. "$root/bench/lib/valkey.sh"
trap 'kill ${stack:-} 2>/dev/null; wait ${stack:-} 2>/dev/null; rm -f "${log:-}"' EXIT
# shellcheck disable=SC2086
start_local_stack --soft-cap "$SOFT_CAP" $BACKEND || exit 2
valkey-cli -p "$VALKEY_PORT" QUEUE.CONFIG default SET ticket_ttl 10000 abandon_after 5000 >/dev/null 2>&1 \
  || valkey-cli -p "$VALKEY_PORT" FCALL queue_config 1 default SET ticket_ttl 10000 abandon_after 5000 >/dev/null
set +e
"$root/target/release/queue-cli" swarm --api "http://127.0.0.1:$API_PORT" --chat "http://127.0.0.1:$CHAT_PORT" \
  --users "$USERS" --rate "$RATE" --stay-secs "$STAY" --polling "$POLLING" --abandon "$ABANDON" \
  --admin-token "${ADMIN_TOKEN:-local-admin}" --quiet
rc=$?
exit $rc

#!/usr/bin/env bash
# swarm-lanes.sh -- queue-cli swarm through lanes, access codes and the app's login:
# valkey-server with the module, queue-manager, chat-server and a queue-api started with
# the identity flags (--identity-jwks pointing at the JWKS this script has the swarm
# write), all on free loopback ports. The swarm gives queue "lanes" the lanes
# presale,general through the back office, uploads CODES presale codes of CODE_USES uses
# each, and sends USERS virtual users at RATE per second, every one an account with a
# signed token: a share enters with a code (some with one already used up, some with one
# never uploaded), a share opens a second tab. Prints the swarm's report and exits with
# its status: 1 on any violation (a lane or FIFO inversion, a code used beyond its uses
# or refused wrongly, an account with two places, over capacity, a double claim).
#
#   bash bench/swarm-lanes.sh                 # USERS=1500 RATE=60 SOFT_CAP=40 STAY=1
#   REDUCED=1 bash bench/swarm-lanes.sh       # 300 users, about half a minute (scripts/test.sh)
#   ALG=rs256 bash bench/swarm-lanes.sh       # a key made by openssl (rs256 or eddsa) instead
#
# Needs the release build (cargo build --release --workspace) and valkey-server.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${REDUCED:-}" ]; then
  USERS=${USERS:-300}; RATE=${RATE:-50}; SOFT_CAP=${SOFT_CAP:-25}; CODES=${CODES:-30}
else
  USERS=${USERS:-1500}; RATE=${RATE:-60}; SOFT_CAP=${SOFT_CAP:-40}; CODES=${CODES:-150}
fi
STAY=${STAY:-1}; CODE_USES=${CODE_USES:-2}; ALG=${ALG:-es256}; SEED=${SEED:-1}
bin="$root/target/release"
for b in queue-api queue-manager chat-server queue-cli libvalkey_queue.so; do
  [ -e "$bin/$b" ] || { echo "missing $bin/$b: run cargo build --release --workspace" >&2; exit 2; }
done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
. "$root/bench/lib/valkey.sh"
pids=()
cleanup() {
  for p in "${pids[@]}" ${vpid:-}; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}" ${vpid:-}; do wait "$p" 2>/dev/null || true; done
  rm -rf "${dir:-}"
}
trap cleanup EXIT
start_valkey || exit 2
url="redis://127.0.0.1:$vport/"
api_port=$(port); chat_port=$(port); manager_port=$(port)
token=bench-admin; issuer=https://login.bench.invalid; audience=waiting-room

# The app's login: the swarm makes an ES256 key (or reads the one openssl made) and
# writes the JWKS queue-api is started with.
key="$dir/login-key.pem"; jwks="$dir/login-jwks.json"
case "$ALG" in
  es256) ;;
  rs256) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$key" 2>/dev/null ;;
  eddsa) openssl genpkey -algorithm ed25519 -out "$key" 2>/dev/null ;;
  *) echo "ALG must be es256, rs256 or eddsa" >&2; exit 2 ;;
esac
identity=(--identity-key "$key" --identity-issuer "$issuer" --identity-audience "$audience")
"$bin/queue-cli" swarm "${identity[@]}" --identity-jwks-out "$jwks" --keys-only

valkey-cli -p "$vport" QUEUE.CONFIG lanes SET soft_cap "$SOFT_CAP" ticket_ttl 10000 abandon_after 5000 >/dev/null
"$bin/chat-server" --valkey-url "$url" --listen "127.0.0.1:$chat_port" >"$dir/chat.log" 2>&1 & pids+=($!)
"$bin/queue-manager" --valkey-url "$url" --listen "127.0.0.1:$manager_port" >"$dir/manager.log" 2>&1 & pids+=($!)
"$bin/queue-api" --valkey-url "$url" --listen "127.0.0.1:$api_port" --chat-url "http://127.0.0.1:$chat_port/" \
  --admin-token "$token" --trusted-proxies 127.0.0.1 \
  --identity-jwks "$jwks" --identity-issuer "$issuer" --identity-audience "$audience" \
  --identity-cookie app_session >"$dir/api.log" 2>&1 & pids+=($!)
for _ in $(seq 200); do
  curl -sf "http://127.0.0.1:$api_port/healthz" 2>/dev/null | grep -q '"up"' && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$api_port/healthz" | grep -q '"up"' || { echo "queue-api did not come up:" >&2; cat "$dir/api.log" >&2; exit 2; }

set +e
"$bin/queue-cli" swarm --api "http://127.0.0.1:$api_port" --chat "http://127.0.0.1:$chat_port" --queue lanes \
  --users "$USERS" --rate "$RATE" --stay-secs "$STAY" --polling 0.5 --timeout-secs 300 --seed "$SEED" \
  --admin-token "$token" --lanes presale,general --codes "$CODES" --code-uses "$CODE_USES" \
  --presale 0.2 --code-reuse 0.03 --code-unknown 0.03 \
  "${identity[@]}" --identity-cookie app_session --second-tab 0.2 --quiet
rc=$?
[ $rc -eq 0 ] || { echo "--- queue-api's log (last lines)"; tail -20 "$dir/api.log"; }
exit $rc

#!/usr/bin/env bash
# CI for docker/: builds the images on a locally made base (no image registry
# needed: Debian bookworm by debootstrap, then `docker import`), runs valkey, the
# three services, the gate and its example app from them with host networking on
# free loopback ports, sends a queue-cli swarm through them and another through the
# gate (every audit must read zero), stops them with SIGTERM (each must exit 0, and
# no session may be left), and checks that
# `docker-compose config` accepts docker/compose.yaml. Starts dockerd when none
# answers, and stops it again at the end. Expects the release build (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
DOCKER=${DOCKER:-/usr/bin/docker}
[ -x "$DOCKER" ] || DOCKER=docker
work=$(mktemp -d)
started_dockerd=""
containers=()

cleanup() {
  for c in "${containers[@]}"; do $DOCKER rm -f "$c" >/dev/null 2>&1 || true; done
  if [ -n "$started_dockerd" ]; then
    kill "$started_dockerd" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$started_dockerd" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# 1. A docker daemon.
if ! $DOCKER info >/dev/null 2>&1; then
  dockerd >"$work/dockerd.log" 2>&1 &
  started_dockerd=$!
  for _ in $(seq 1 120); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.5; done
  $DOCKER info >/dev/null 2>&1 || { cat "$work/dockerd.log" >&2; echo "dockerd did not start" >&2; exit 1; }
fi

# 2. Base images (docker/base-images.sh): Debian bookworm, made here once and kept,
#    and the same with this machine's valkey-server (the public default is valkey/valkey).
base=valkey-queue-ci/bookworm:base
valkey_base=valkey-queue-ci/valkey:base
DOCKER=$DOCKER bash docker/base-images.sh

# 3. The four images.
t0=$(date +%s.%N)
BASE=$base VALKEY_BASE=$valkey_base PREFIX=valkey-queue-ci TAG=test DOCKER=$DOCKER bash docker/build-images.sh
t1=$(date +%s.%N)
echo "images built in $(python3 -c "print(round($t1 - $t0, 1))") s"
for i in valkey queue-api queue-manager chat-server queue-gate gate-example-app; do
  printf '  %-14s %s\n' "$i" "$($DOCKER image inspect -f '{{.Size}}' "valkey-queue-ci/$i:test" | awk '{printf "%.1f MB", $1/1e6}')"
done

# 4. The system from the images, host networking, loopback ports.
# Ports below the kernel's ephemeral range (outgoing connections never take them
# meanwhile), free on every address (valkey listens on all of them), all different.
free_ports() {
  python3 - "$1" <<'PY'
import random, socket, sys
def free(p):
    for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        s = socket.socket(fam)
        try:
            s.bind((addr, p))
        except OSError as e:
            if fam == socket.AF_INET6 and e.errno == 99:  # no IPv6 here
                continue
            return False
        finally:
            s.close()
    return True
ports = [p for p in random.sample(range(20000, 32000), 200) if free(p)][: int(sys.argv[1])]
print(" ".join(map(str, ports)))
PY
}
read -r api chat mgr gate app v1 v2 v3 <<<"$(free_ports 8)"
vports=("$v1" "$v2" "$v3")
run() { # name image env...
  local name=$1 image=$2; shift 2
  local args=()
  for e in "$@"; do args+=(-e "$e"); done
  $DOCKER run -d --name "$name" --network host "${args[@]}" "$image" >/dev/null
  containers+=("$name")
}
suffix=$$
# Up to 60 s: the first container after dockerd started can be slow to come up. A
# container that exited (its port taken after all) is tried again on another port.
up=
for attempt in 1 2 3; do
  vport=${vports[$((attempt - 1))]}
  run "vq-valkey-$suffix-$attempt" valkey-queue-ci/valkey:test "VALKEY_PORT=$vport" "QUEUE_MODULE_ARGS=default-soft-cap 50"
  for _ in $(seq 1 600); do
    valkey-cli -p "$vport" ping 2>/dev/null | grep -q PONG && { up=1; break; }
    [ "$($DOCKER inspect -f '{{.State.Running}}' "vq-valkey-$suffix-$attempt")" = true ] || break
    sleep 0.1
  done
  [ -n "$up" ] && break
  $DOCKER logs "vq-valkey-$suffix-$attempt" >&2 || true
  echo "the valkey container on port $vport did not answer (attempt $attempt)" >&2
done
[ -n "$up" ] || exit 1
valkey-cli -p "$vport" QUEUE.CONFIG default SET soft_cap 50 ticket_ttl 10000 abandon_after 5000 >/dev/null
# The gate's queue: a short lease, so that idle people's slots come back within the run.
valkey-cli -p "$vport" QUEUE.CONFIG shop SET soft_cap 20 ticket_ttl 10000 abandon_after 5000 session_lease 4000 >/dev/null
url="redis://127.0.0.1:$vport/"
run "vq-chat-$suffix" valkey-queue-ci/chat-server:test "VALKEY_URL=$url" "LISTEN=127.0.0.1:$chat" "HEALTH_PORT=$chat"
run "vq-manager-$suffix" valkey-queue-ci/queue-manager:test "VALKEY_URL=$url" "LISTEN=127.0.0.1:$mgr" "HEALTH_PORT=$mgr"
run "vq-api-$suffix" valkey-queue-ci/queue-api:test "VALKEY_URL=$url" "LISTEN=127.0.0.1:$api" "HEALTH_PORT=$api" \
  "CHAT_URL=http://127.0.0.1:$chat" ADMIN_TOKEN=ci-admin TRUSTED_PROXIES=127.0.0.0/8 "ADMIT_URLS=shop=/gate/claim"
run "vq-app-$suffix" valkey-queue-ci/gate-example-app:test "LISTEN=127.0.0.1:$app" "HEALTH_PORT=$app"
# The image's health check asks /healthz, which the gate passes to the app: healthy
# once both answer. TRUSTED_PROXIES: the swarm's users each tell their own address
# in X-Forwarded-For from loopback, standing for a proxy in front; the gate passes it
# on to queue-api, which trusts the gate and loopback likewise (entries are limited
# per address).
run "vq-gate-$suffix" valkey-queue-ci/queue-gate:test "VALKEY_URL=$url" "LISTEN=127.0.0.1:$gate" "HEALTH_PORT=$gate" \
  "GATE_UPSTREAM=http://127.0.0.1:$app" "GATE_ROUTES=/checkout=shop" "QUEUE_API=http://127.0.0.1:$api" \
  GATE_IDLE=4s GATE_TICK=200ms TRUSTED_PROXIES=127.0.0.0/8
for c in chat manager api app gate; do
  for _ in $(seq 1 150); do
    [ "$($DOCKER inspect -f '{{.State.Health.Status}}' "vq-$c-$suffix")" = healthy ] && break
    sleep 0.2
  done
  echo "vq-$c: $($DOCKER inspect -f '{{.State.Health.Status}}' "vq-$c-$suffix")"
done

status=0
"$root/target/release/queue-cli" swarm --api "http://127.0.0.1:$api" --chat "http://127.0.0.1:$chat" \
  --users "${SWARM_USERS:-500}" --rate 100 --stay-secs 1 --admin-token ci-admin --timeout-secs 120 --quiet || status=$?
# Through the gate: straight in while nobody waits and a slot is free (the gate's
# default), else sent to the room, in line, claimed at /gate/claim; into the app.
"$root/target/release/queue-cli" swarm --api "http://127.0.0.1:$api" --chat "http://127.0.0.1:$chat" --queue shop \
  --gate "http://127.0.0.1:$gate" --gate-path /checkout --gate-idle-secs 4 \
  --users "${GATE_SWARM_USERS:-200}" --rate 50 --stay-secs 0.5 --admin-token ci-admin --timeout-secs 120 --quiet || status=$?

# 5. SIGTERM each service; each exits 0; no session is left.
# The example app is not one of ours (it has no graceful stop): removed after the gate.
for c in api chat manager gate; do
  $DOCKER stop -t 30 "vq-$c-$suffix" >/dev/null
  code=$($DOCKER inspect -f '{{.State.ExitCode}}' "vq-$c-$suffix")
  echo "vq-$c stopped, exit $code"
  [ "$code" = 0 ] || status=1
done
$DOCKER rm -f "vq-app-$suffix" >/dev/null
active=$(valkey-cli -p "$vport" QUEUE.INFO default | awk '$0=="active"{getline; print; exit}')
echo "sessions left after stop: ${active:-?}"
[ "${active:-x}" = 0 ] || { $DOCKER logs "vq-chat-$suffix" 2>&1 | tail -5; status=1; }

# 6. The compose file parses.
(cd docker && docker-compose -f compose.yaml config -q) || status=1
echo "docker/compose.yaml: docker-compose config accepts it"
exit "$status"

#!/usr/bin/env bash
# Checks deploy/kubernetes without a cluster:
#   1. every manifest, and each overlay as `kubectl kustomize` renders it, strictly
#      valid against Kubernetes' schemas (kubernetes-validate) and prometheus-operator's
#      CRDs; the validator's self-test (bad manifests refused);
#   2. the PrometheusRule and the dashboards ConfigMap equal to docker/ (drift);
#   3. with docker: each image's user is its pods' runAsUser, then kubelet played for
#      each overlay (k8s.py play: every Deployment and StatefulSet started as its spec
#      says, probed, a queue-cli swarm through them with every audit at zero, each
#      stopped with SIGTERM within its grace period).
# Uses the images docker/ci.sh builds (valkey-queue-ci/*:test), building them the same
# way when missing; starts dockerd when none answers and stops it again at the end.
# Expects the release build (queue-cli and the services).
#
#   bash deploy/kubernetes/check.sh            # everything
#   bash deploy/kubernetes/check.sh --static   # 1 and 2 only (no docker)
#   SWARM_USERS=300 REBUILD_IMAGES=1 bash deploy/kubernetes/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DOCKER=${DOCKER:-/usr/bin/docker}
[ -x "$DOCKER" ] || DOCKER=docker
export DOCKER
k8s="python3 deploy/kubernetes/k8s.py"
export PYTHONDONTWRITEBYTECODE=1
work=$(mktemp -d)
started_dockerd=""

cleanup() {
  # Containers a failed play left behind (each play removes its own).
  if [ -n "$started_dockerd" ] || $DOCKER info >/dev/null 2>&1; then
    ids=$($DOCKER ps -aq --filter "label=valkey-queue-kubelet" 2>/dev/null || true)
    [ -z "$ids" ] || $DOCKER rm -f $ids >/dev/null 2>&1 || true
  fi
  if [ -n "$started_dockerd" ]; then
    kill "$started_dockerd" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$started_dockerd" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

t0=$(date +%s)
echo "== validate (kubernetes-validate $(python3 -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))'), strict)"
$k8s validate
echo "== validator self-test"
$k8s selftest
echo "== drift against docker/"
$k8s drift
[ "${1:-}" = --static ] && { echo "static checks passed in $(($(date +%s) - t0)) s"; exit 0; }

# A docker daemon.
if ! $DOCKER info >/dev/null 2>&1; then
  dockerd >"$work/dockerd.log" 2>&1 &
  started_dockerd=$!
  for _ in $(seq 1 120); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.5; done
  $DOCKER info >/dev/null 2>&1 || { cat "$work/dockerd.log" >&2; echo "dockerd did not start" >&2; exit 1; }
fi

# The images, as docker/ci.sh builds them (on docker/base-images.sh's bases), when
# they are missing.
images=(valkey queue-api queue-manager chat-server)
missing=""
for i in "${images[@]}"; do
  $DOCKER image inspect "valkey-queue-ci/$i:test" >/dev/null 2>&1 || missing=1
done
if [ -n "$missing" ] || [ -n "${REBUILD_IMAGES:-}" ]; then
  echo "== images (as docker/ci.sh builds them)"
  base=valkey-queue-ci/bookworm:base
  valkey_base=valkey-queue-ci/valkey:base
  bash docker/base-images.sh
  BASE=$base VALKEY_BASE=$valkey_base PREFIX=valkey-queue-ci TAG=test DOCKER=$DOCKER bash docker/build-images.sh
fi

# The gate's image, when docker/build-images.sh does not make it yet: the same
# Dockerfile, the same staging (a stripped release binary).
if ! $DOCKER image inspect valkey-queue-ci/queue-gate:test >/dev/null 2>&1 || [ -n "${REBUILD_IMAGES:-}" ]; then
  [ -x target/release/queue-gate ] || cargo build --release -p queue-gate
  mkdir -p "$work/gate"
  cp target/release/queue-gate "$work/gate/"
  strip --strip-debug "$work/gate/queue-gate" 2>/dev/null || true
  $DOCKER build -q -f docker/service.Dockerfile --build-arg BASE=valkey-queue-ci/bookworm:base \
    --build-arg SERVICE=queue-gate --build-arg PORT=8090 -t valkey-queue-ci/queue-gate:test "$work/gate" >/dev/null
  echo "built valkey-queue-ci/queue-gate:test"
fi

echo "== image users"
$k8s user-ids
# Each overlay with every component: every workload there is.
for overlay in in-cluster-valkey+gate+monitoring managed-valkey+gate+monitoring; do
  echo "== play kubelet: $overlay"
  t=$(date +%s)
  $k8s play "$overlay" --users "${SWARM_USERS:-300}"
  echo "play $overlay: $(($(date +%s) - t)) s"
done
echo "deploy/kubernetes: every check passed in $(($(date +%s) - t0)) s"

#!/usr/bin/env bash
# Builds the images (valkey with the module, queue-api, queue-manager, chat-server,
# queue-gate, and gate-example-app: the example app behind the gate, which answers
# with whom it was told it serves) from a release build: the binaries are built on
# the host if missing (`cargo build --release`), stripped of debug info and copied
# in; nothing compiles inside docker.
#
#   bash docker/build-images.sh
#   BASE=my/debian:bookworm VALKEY_BASE=my/valkey:8 TAG=1.0 bash docker/build-images.sh
#   PROFILE=dist bash docker/build-images.sh    # images for production (see below)
#
# BASE (default debian:bookworm-slim) is the services' base image, VALKEY_BASE
# (default valkey/valkey:8.0-bookworm) one that has valkey-server on PATH; PREFIX
# (valkey-queue) and TAG (latest) name the images, as docker/compose.yaml expects.
# PROFILE (release) is the cargo profile the binaries come from: `dist` (Cargo.toml:
# release with whole-program link-time optimization and one codegen unit) takes a
# few more minutes to build and gives faster binaries (bench/README.md, "The gate");
# CI uses the release build its tests ran on.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-debian:bookworm-slim}
VALKEY_BASE=${VALKEY_BASE:-valkey/valkey:8.0-bookworm}
PREFIX=${PREFIX:-valkey-queue}
TAG=${TAG:-latest}
DOCKER=${DOCKER:-docker}
PROFILE=${PROFILE:-release}
out=target/$PROFILE

services=(queue-api:8080 queue-manager:9091 chat-server:8081 queue-gate:8090)
need=""
for s in "${services[@]}"; do [ -x "$out/${s%%:*}" ] || need=1; done
[ -f "$out/libvalkey_queue.so" ] || need=1
if [ -n "$need" ]; then
  cargo build --profile "$PROFILE" -p queue-api -p queue-manager -p chat-server -p queue-gate -p valkey-queue
fi
[ -x "$out/examples/gate-upstream" ] || cargo build --profile "$PROFILE" -p e2e --example gate-upstream

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
for s in "${services[@]}"; do
  cp "$out/${s%%:*}" "$ctx/"
done
cp "$out/examples/gate-upstream" "$ctx/gate-example-app"
cp "$out/libvalkey_queue.so" docker/valkey-entrypoint.sh "$ctx/"
strip --strip-debug "$ctx"/queue-api "$ctx"/queue-manager "$ctx"/chat-server "$ctx"/queue-gate \
  "$ctx"/gate-example-app "$ctx"/libvalkey_queue.so 2>/dev/null || true

$DOCKER build -q -f docker/valkey.Dockerfile --build-arg "BASE=$VALKEY_BASE" -t "$PREFIX/valkey:$TAG" "$ctx" >/dev/null
echo "built $PREFIX/valkey:$TAG"
for s in "${services[@]}" gate-example-app:3000; do
  name=${s%%:*} port=${s##*:}
  $DOCKER build -q -f docker/service.Dockerfile --build-arg "BASE=$BASE" --build-arg "SERVICE=$name" \
    --build-arg "PORT=$port" -t "$PREFIX/$name:$TAG" "$ctx" >/dev/null
  echo "built $PREFIX/$name:$TAG"
done

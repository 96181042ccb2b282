#!/usr/bin/env bash
# The base images docker/ci.sh and deploy/kubernetes/check.sh build on, made locally
# (no image registry needed):
#   valkey-queue-ci/bookworm:base  Debian bookworm by debootstrap (minbase, this
#                                  machine's apt mirror), then `docker import`; made
#                                  once and kept;
#   valkey-queue-ci/valkey:base    the same with this machine's valkey-server and the
#                                  libraries it needs (the public default is
#                                  valkey/valkey); built every time (docker's cache).
# Needs a docker daemon that answers (DOCKER names the client) and root for debootstrap.
#
#   bash docker/base-images.sh
#   BASE=valkey-queue-ci/bookworm:base VALKEY_BASE=valkey-queue-ci/valkey:base bash docker/build-images.sh
set -euo pipefail
DOCKER=${DOCKER:-docker}
base=valkey-queue-ci/bookworm:base
valkey_base=valkey-queue-ci/valkey:base
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! $DOCKER image inspect "$base" >/dev/null 2>&1; then
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  debootstrap --variant=minbase bookworm "$work/rootfs" "${mirror:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  tar -C "$work/rootfs" -c . | $DOCKER import - "$base" >/dev/null
  rm -rf "$work/rootfs"
fi

mkdir -p "$work/vb/libs"
cp "$(command -v valkey-server)" "$work/vb/valkey-server"
ldd "$(command -v valkey-server)" | awk '/=> \//{print $3}' | grep -v -E '/(libc|libm|libgcc_s|ld-linux[^/]*)\.so' \
  | xargs -r cp -L -t "$work/vb/libs"
printf 'FROM %s\nCOPY libs/ /usr/lib/x86_64-linux-gnu/\nCOPY valkey-server /usr/bin/valkey-server\n' "$base" >"$work/vb/Dockerfile"
$DOCKER build -q -t "$valkey_base" "$work/vb" >/dev/null

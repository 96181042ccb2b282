#!/bin/bash
# Starts valkey-server in the foreground with AOF on and the module loaded.
set -euo pipefail
# shellcheck disable=SC2086 # QUEUE_MODULE_ARGS is a list of words on purpose
exec valkey-server --port "${VALKEY_PORT}" --dir /data --appendonly yes --appendfsync everysec \
  --loadmodule /usr/lib/valkey-queue/libvalkey_queue.so ${QUEUE_MODULE_ARGS} "$@"

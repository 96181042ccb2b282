#!/usr/bin/env bash
# Loads (or replaces) the Lua fallback library into a Valkey server, with fresh
# entropy for ticket secrets. Arguments go to valkey-cli, e.g.:
#   bash scripts/load-lua.sh -h my-valkey.example -p 6379 --tls --user admin --pass ...
# The services' client crate does the same by itself when it finds neither the
# module nor the library.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
entropy=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
sed "s/__QUEUE_ENTROPY__/$entropy/" "$root/lua-fallback/queue.lua" | valkey-cli "$@" -x FUNCTION LOAD REPLACE

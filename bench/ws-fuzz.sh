#!/usr/bin/env bash
# The WebSocket fuzzer of services/chat-server/tests/ws_fuzz.rs at length: the
# release chat-server as a child process with a real valkey-server and the module,
# hostile raw-TCP clients with hand-built frames (random, oversized, binary,
# fragmented and never finished, half frames, protocol violations, floods, readers
# that never read) while four good sessions chat. Prints how every kind of hostile
# connection ended, how long the never-reading clients were kept, the good sessions'
# message count, and chat-server's VmRSS before, at peak and after; exits 1 on any
# unexpected end, harm to a good session, or memory past the bounds.
#   bash bench/ws-fuzz.sh                          # 5,000 hostile connections
#   CONNECTIONS=1000 bash bench/ws-fuzz.sh         # a quick run
# Replay: WS_FUZZ_SEED=<printed seed> with the same CONNECTIONS. CI runs 400 as a test.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
CONNECTIONS=${CONNECTIONS:-5000}
. "$root/bench/lib/valkey.sh"
build_test chat-server ws_fuzz
status=0
WS_FUZZ_CONNECTIONS=$CONNECTIONS run_test chat-server ws_fuzz '^ws-fuzz|^  [A-Za-z]|panicked|^seed|^connection' | head -80 || status=1
exit $status

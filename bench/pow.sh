#!/usr/bin/env bash
# pow.sh -- the proof of work's two sides, at the recommended difficulty (16 bits):
#  1. solving in headless Chromium with the waiting-room page's own Web Worker code
#     (taken from services/queue-api/static/index.html), CHALLENGES random
#     challenges: median, p90 and max time per solve (goal: <= 1 s);
#  2. the server's check of one solution (HMAC + SHA-256, what queue-api spends per
#     entry before its one SET NX), median of ROUNDS rounds with the spread (goal:
#     <= 5 us), and native solving (queue-cli's) for comparison.
#
#   bash bench/pow.sh              # DIFFICULTY=16 CHALLENGES=50 ROUNDS=5
# Needs what scripts/install-deps.sh installs (chromium, node, tests/browser's packages).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
DIFFICULTY=${DIFFICULTY:-16}; CHALLENGES=${CHALLENGES:-50}; ROUNDS=${ROUNDS:-5}
bash "$root/scripts/install-deps.sh" >/dev/null
node "$root/bench/pow-browser.mjs" "$root/services/queue-api/static/index.html" "$DIFFICULTY" "$CHALLENGES"
cargo run --release --quiet -p queue-core --example pow_bench -- "$DIFFICULTY" 200 "$ROUNDS"

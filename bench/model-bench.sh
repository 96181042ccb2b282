#!/usr/bin/env bash
# The state-machine test of valkey-module/tests/state_machine.rs at length: every
# queue command and clock jump checked step by step against the independent
# reference model, on the module and the Lua library at once (one server each).
# A report, not a CI step: prints runs, steps, steps per second and failed seeds
# (each replays with MODEL_SEED=<seed>); exits 1 if any seed failed.
#   bash bench/model-bench.sh                      # 5,000,000 steps per backend (10 million in all)
#   STEPS=200000 bash bench/model-bench.sh         # a quick run
# Environment: STEPS (per backend), BASE_SEED (default: from the clock; printed).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
STEPS=${STEPS:-5000000}
BASE_SEED=${BASE_SEED:-$(date +%s)}
cargo build --release -q -p valkey-queue
cargo test --release -q -p valkey-queue --test state_machine --no-run 2>/dev/null
echo "model bench: $STEPS steps per backend, base seed $BASE_SEED (replay all: BASE_SEED=$BASE_SEED)"
start=$(date +%s)
set +e
MODEL_STEPS=$STEPS MODEL_BASE_SEED=$BASE_SEED MODEL_KEEP_GOING=1 \
  cargo test --release -q -p valkey-queue --test state_machine -- --nocapture --test-threads 2 2>&1 |
  grep -oE '(Module|Lua): [0-9]+ runs.*' | sed 's/^/  /'
status=${PIPESTATUS[0]}
set -e
secs=$(( $(date +%s) - start ))
echo "  wall time ${secs} s for $((2 * STEPS)) steps: $(( 2 * STEPS / (secs > 0 ? secs : 1) )) steps/s over both backends"
exit $(( status == 0 ? 0 : 1 ))

#!/usr/bin/env bash
# The argument fuzzer of valkey-module/tests/arg_fuzz.rs at length: generated
# argument vectors for every command, pipelined against a pre-populated server with
# the module and one with the Lua library (both at once), each vector between two
# DEBUG DIGESTs of the whole dataset. Prints, per backend: vectors sent, refused,
# accepted, crashes, state changes on refusal, unclear errors, time, the seed (replay:
# ARG_FUZZ_SEED=<seed> with the same VECTORS) and the most frequent refusals; exits
# 1 on any crash, state change on refusal or unclear error.
#   bash bench/arg-fuzz.sh                    # 1,000,000 vectors per backend
#   VECTORS=100000 bash bench/arg-fuzz.sh     # a quick run
# CI runs 20,000 per backend as a plain test (cargo test -p valkey-queue --test arg_fuzz).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
VECTORS=${VECTORS:-1000000}
. "$root/bench/lib/valkey.sh"
build_test valkey-queue arg_fuzz
echo "arg fuzz: $VECTORS vectors per backend (module, Lua library), both at once"
start=$(date +%s)
status=0
ARG_FUZZ_VECTORS=$VECTORS run_test valkey-queue arg_fuzz \
  '^arg-fuzz|^ +[0-9]+  |panicked|refused with|unclear error|stopped answering' --test-threads 2 | sed 's/^/  /' || status=1
echo "  wall time $(( $(date +%s) - start )) s for $((2 * VECTORS)) vectors"
exit $status

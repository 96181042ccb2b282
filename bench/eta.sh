#!/usr/bin/env bash
# eta.sh -- how honest the estimated wait is: ROUNDS swarms, each on a fresh local
# stack (scripts/run-local.sh), with a crowd arriving faster than places free, so a
# line builds and drains. The swarm grades every estimate against the wait that
# followed: |predicted - actual| / actual of every figure shown, per person-second,
# at entry and at rank 10 (waits under a second count as one second), and how many
# figures a person saw per minute of waiting. Prints each round's p50/p90 (and the error
# by the time still to wait) and the median of the rounds' p50s with their spread; exits 1
# if an audit failed, 2 if a stack did not come up.
#
#   bash bench/eta.sh      # ROUNDS=3 USERS=2000 RATE=40 SOFT_CAP=200 STAY=10
#   BACKEND=--lua bash bench/eta.sh
#
# The crowd is the swarm's default mix (10% abandon, half of them by leaving, 10%
# poll): people who give up ahead of someone make that person's wait shorter than
# predicted, as in a real launch.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS=${ROUNDS:-3}; USERS=${USERS:-2000}; RATE=${RATE:-40}; SOFT_CAP=${SOFT_CAP:-200}; STAY=${STAY:-10}
BACKEND=${BACKEND:-}
. "$root/bench/lib/valkey.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for round in $(seq "$ROUNDS"); do
  # Every port free (the gate's and the example app's too: a port already taken ends the
  # whole stack).
  export VALKEY_PORT=$(port) API_PORT=$(port) CHAT_PORT=$(port) MANAGER_PORT=$(port) GATE_PORT=$(port) APP_PORT=$(port)
  # shellcheck disable=SC2086
  bash "$root/scripts/run-local.sh" --soft-cap "$SOFT_CAP" $BACKEND >"$out/stack.log" 2>&1 & stack=$!
  up=0
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$API_PORT/healthz" 2>/dev/null | grep -q '"up"' && { up=1; break; }
    kill -0 $stack 2>/dev/null || { cat "$out/stack.log"; exit 2; }
    sleep 0.5
  done
  # A stack that never came up would grade nobody and print zeros as if measured.
  [ $up = 1 ] || { echo "round $round: the stack did not come up in 5 minutes" >&2; cat "$out/stack.log"; kill $stack; exit 2; }
  set +e
  "$root/target/release/queue-cli" swarm --api "http://127.0.0.1:$API_PORT" --chat "http://127.0.0.1:$CHAT_PORT" \
    --users "$USERS" --rate "$RATE" --stay-secs "$STAY" --admin-token "${ADMIN_TOKEN:-local-admin}" \
    --seed "$round" --timeout-secs 900 --quiet --json >"$out/round$round.json"
  rc=$?
  set -e
  kill $stack 2>/dev/null; wait $stack 2>/dev/null || true
  [ $rc -eq 1 ] && status=1
  python3 - "$out/round$round.json" "$round" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e, t = r["eta_error_at_entry"], r["eta_error_at_rank10"]
s, m = r["eta_error_shown"], r["eta_figures_per_minute"]
print(f"round {sys.argv[2]}: as shown p50 {s['p50']:.3f} p90 {s['p90']:.3f} (none shown "
      f"{r['eta_shown_missing_share'] * 100:.1f} %); figures a minute p50 {m['p50']:.2f} p99 {m['p99']:.2f}; "
      f"entry p50 {e['p50']:.3f} p90 {e['p90']:.3f} (n={e['count']}); "
      f"rank 10 p50 {t['p50']:.3f} p90 {t['p90']:.3f} (n={t['count']}); missing {r['eta_missing']}; "
      f"wait p50 {r['wait_seconds']['p50']:.1f} s max {r['wait_seconds']['max']:.1f} s; "
      f"audits fifo {r['fifo_inversions']} cap {r['over_capacity']}+{r['server_over_capacity']} claims {r['double_claims']}")
for b in r.get("eta_error_by_remaining", []):
    print(f"  {b['remaining']:<14} {b['share'] * 100:5.1f} % of seconds, error p50 {b['error']['p50']:.3f} "
          f"p90 {b['error']['p90']:.3f}, too long {b['too_long_share'] * 100:.0f} %")
PY
done
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
rounds = [json.load(open(f"{sys.argv[1]}/round{i}.json")) for i in range(1, int(sys.argv[2]) + 1)]
for key, name in [("eta_error_shown", "as shown"), ("eta_error_at_entry", "at entry"), ("eta_error_at_rank10", "at rank 10")]:
    p50s = [r[key]["p50"] for r in rounds if r[key]["count"] > 0]
    if not p50s:
        print(f"ETA error {name}: no figure was given there (none graded)")
        continue
    print(f"ETA error {name}: median of round p50s {statistics.median(p50s):.3f} "
          f"(spread {min(p50s):.3f}-{max(p50s):.3f}; goal <= 0.25)")
# The goal is the person in the middle (as the swarm's own report judges it); the p99
# are people whose whole wait is about a minute, who see 60 s, 40 s, 20 s and then
# "any moment now" (counted as a figure of its own).
for p, goal in [("p50", "; goal <= 3"), ("p99", "")]:
    xs = [r["eta_figures_per_minute"][p] for r in rounds]
    print(f"ETA figures a minute {p}: median of rounds {statistics.median(xs):.2f} "
          f"(spread {min(xs):.2f}-{max(xs):.2f}{goal})")
PY
exit $status

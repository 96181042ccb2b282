#!/usr/bin/env bash
# poll-follow.sh -- status polls answered from the push follower: what a poll costs
# Valkey and how far behind Valkey its answers are. One valkey-server (the module),
# INSTANCES queue-api instances, USERS people in a closed queue polled round robin
# across the instances by POLLERS threads for SECS seconds, while CHURN times a second
# someone leaves and someone new enters (every poller's rank moves).
#
# - Valkey time per poll: INFO commandstats after the round (reset before it), the
#   usec of the commands queue-api sends (QUEUE.* but the bench's own QUEUE.ENTER,
#   QUEUE.LEAVE and QUEUE.STATUS, and the log reads XRANGE, XREVRANGE) divided by the
#   number of polls. The commands these call inside (ZRANK, XADD) count in theirs. Goal with the follower: <= 50 ns, flat with 1 and
#   3 instances.
# - Lag: for SAMPLE polls a second, QUEUE.STATUS is read just before and after; an
#   answer that is neither is polled again every 5 ms until it agrees with Valkey:
#   the time that took is how far behind it was (0 when it agreed). p99 goal <= 100 ms.
#
# Rounds with the follower (--status-from-follower true) and without (false) are
# interleaved, ROUNDS of each per instance count; the median and the spread
# (min..max) are printed.
#
#   bash bench/poll-follow.sh                  # USERS=2000 POLLERS=16 SECS=20 ROUNDS=3
#   REDUCED=1 bash bench/poll-follow.sh        # < 60 s; fails only when an answer
#                                              # never agreed with Valkey (2 s)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
REDUCED=${REDUCED:-0}
if [ "$REDUCED" = 1 ]; then
  USERS=${USERS:-300}; POLLERS=${POLLERS:-4}; SECS=${SECS:-6}; ROUNDS=${ROUNDS:-1}; CHURN=${CHURN:-20}
else
  USERS=${USERS:-2000}; POLLERS=${POLLERS:-16}; SECS=${SECS:-20}; ROUNDS=${ROUNDS:-3}; CHURN=${CHURN:-50}
fi
. "$root/bench/lib/valkey.sh"
pids=()
cleanup() { for p in "${pids[@]}" ${vpid:-}; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "${dir:-}"; }
trap cleanup EXIT
command -v valkey-server >/dev/null 2>&1 || bash "$root/scripts/install-deps.sh"
# Needs the release build (scripts/test.sh makes it); what is missing is built one
# package at a time, as the tests build them (no features unified anew).
[ -e "$root/target/release/libvalkey_queue.so" ] || (cd "$root" && cargo build --release -q -p valkey-queue)
[ -e "$root/target/release/queue-api" ] || (cd "$root" && cargo build --release -q -p queue-api)
start_valkey
valkey-cli -p "$vport" QUEUE.CONFIG default SET soft_cap 0 abandon_after 600000 >/dev/null
api_ports=()
for mode in true false; do
  for i in 1 2 3; do
    p=$(port)
    "$root/target/release/queue-api" --valkey-url "redis://127.0.0.1:$vport/" --listen "127.0.0.1:$p" \
      --rate-limit 0 --status-from-follower "$mode" >"$dir/api-$mode-$i.log" 2>&1 & pids+=($!)
    api_ports+=("$mode:$p")
  done
done
for entry in "${api_ports[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${entry#*:}/healthz" | grep -q '"up"' && break; sleep 0.1; done
done
python3 - "$vport" "$USERS" "$POLLERS" "$SECS" "$ROUNDS" "$CHURN" "$REDUCED" "${api_ports[@]}" <<'EOF'
import json, random, socket, statistics, sys, threading, time, urllib.request
vport, users, pollers, secs, rounds, churn, reduced = (int(a) for a in sys.argv[1:8])
apis = {"true": [], "false": []}
for a in sys.argv[8:]:
    mode, port = a.split(":")
    apis[mode].append(f"http://127.0.0.1:{port}")

class Resp:
    """A minimal RESP client (one connection)."""
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", vport)); self.f = self.s.makefile("rb")
    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode(); out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out); return self.read()
    def read(self):
        line = self.f.readline().rstrip(b"\r\n"); t, rest = line[:1], line[1:]
        if t in (b"+", b"-"): return rest.decode()
        if t == b":": return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0: return None
            d = self.f.read(n + 2)[:-2]; return d.decode()
        if t == b"*":
            n = int(rest); return None if n < 0 else [self.read() for _ in range(n)]
        if t == b"%":
            n = int(rest); return {self.read(): self.read() for _ in range(n)}
        if t == b"_": return None
        return rest.decode()

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r: return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e: return e.code, json.loads(e.read() or b"{}")

def truth(r, u):
    st = r.call("QUEUE.STATUS", "default", u)
    d = dict(zip(st[::2], st[1::2])) if isinstance(st, list) else st
    return (str(d.get("status", "")).upper(), int(d.get("rank", 0) or 0))

def answer(body):
    return (str(body.get("status", "UNKNOWN")).upper(), int(body.get("rank", 0) or 0))

admin = Resp()
people = [f"pf{i:06d}" for i in range(users)]
for u in people: admin.call("QUEUE.ENTER", "default", u, "n")
fresh = [users]

def round_once(mode, n_inst):
    bases = apis[mode][:n_inst]
    # Everyone's first poll at every instance (polls go round robin across them).
    for u in people:
        for base in bases: get(f"{base}/api/queue/status?userId={u}")
    time.sleep(1.5)  # registered with the followers
    admin.call("CONFIG", "RESETSTAT")
    stop = time.time() + secs; polls = [0]; lags = []; errors = []; lock = threading.Lock()
    def poller(k):
        r = Resp(); i = k; n = 0
        sample_every = max(1, 20)
        while time.time() < stop:
            u = people[i % len(people)]; i += pollers; base = bases[i % n_inst]; n += 1
            if n % sample_every:
                code, body = get(f"{base}/api/queue/status?userId={u}")
                if code not in (200, 404): errors.append((code, body))
                continue
            before = truth(r, u); code, body = get(f"{base}/api/queue/status?userId={u}"); after = truth(r, u)
            got = answer(body) if code == 200 else ("UNKNOWN", 0)
            lo, hi = sorted((before[1], after[1]))
            if got == before or got == after or (got[0] == before[0] == after[0] and lo <= got[1] <= hi):
                lag = 0.0
            else:
                t0 = time.time(); lag = None
                while time.time() - t0 < 2.0:
                    now = truth(r, u); code, body = get(f"{base}/api/queue/status?userId={u}")
                    got = answer(body) if code == 200 else ("UNKNOWN", 0)
                    if got == now or got == truth(r, u): lag = time.time() - t0; break
                    time.sleep(0.005)
                if lag is None: errors.append(("never agreed", u, got, now))
            with lock: lags.append(lag if lag is not None else 2.0)
        with lock: polls[0] += n
    def churner():
        r = Resp(); k = 0
        while time.time() < stop:
            out = people[random.randrange(len(people))]
            r.call("QUEUE.LEAVE", "default", out); r.call("QUEUE.ENTER", "default", out, "n")
            k += 1; time.sleep(1.0 / churn)
    ts = [threading.Thread(target=poller, args=(k,)) for k in range(pollers)] + [threading.Thread(target=churner)]
    for t in ts: t.start()
    for t in ts: t.join()
    stats = admin.call("INFO", "commandstats")
    usec = 0; by = {}
    for line in stats.splitlines():
        if not line.startswith("cmdstat_"): continue
        name, rest = line[len("cmdstat_"):].split(":", 1)
        # The queue commands queue-api sends and its log reads; not the bench's own
        # commands, nor what commands call inside (ZRANK, XADD: counted in theirs).
        if name in ("queue.enter", "queue.leave", "queue.status"): continue
        if not (name.startswith("queue.") or name in ("xrange", "xrevrange")): continue
        f = dict(kv.split("=") for kv in rest.split(","))
        usec += int(f["usec"]); by[name] = (int(f["usec"]), int(f["calls"]))
    top = sorted(by.items(), key=lambda kv: -kv[1][0])[:4]
    print(f"  round instances={n_inst} from_follower={mode}: " + ", ".join(
        f"{k} {u * 1000.0 / max(1, polls[0]):.0f} ns/poll ({c} calls)" for k, (u, c) in top), flush=True)
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0.0
    return usec * 1000.0 / max(1, polls[0]), p99 * 1000, polls[0], errors

results = {}
failed = []
for _ in range(rounds):
    for n_inst in (1, 3):
        for mode in ("true", "false"):
            ns, p99, n, errors = round_once(mode, n_inst)
            results.setdefault((n_inst, mode), []).append((ns, p99, n))
            if errors: failed.append(((n_inst, mode), errors[:5]))
print(f"{users} people, {pollers} pollers, {churn} changes/s, {secs} s a round, {rounds} round(s)")
for (n_inst, mode), rs in sorted(results.items()):
    ns = [r[0] for r in rs]; p99 = [r[1] for r in rs]; n = [r[2] for r in rs]
    print(f"instances={n_inst} from_follower={mode:5}  Valkey ns/poll median {statistics.median(ns):8.1f} "
          f"({min(ns):.1f}..{max(ns):.1f})  lag p99 ms median {statistics.median(p99):6.1f} "
          f"({min(p99):.1f}..{max(p99):.1f})  polls/round {int(statistics.median(n))}")
if failed:
    print("FAIL: answers that never agreed with Valkey or errors:", failed); sys.exit(1)
print("ok: every answer agreed with Valkey")
EOF

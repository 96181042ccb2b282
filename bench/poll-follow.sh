#!/usr/bin/env bash
# poll-follow.sh -- status polls answered from the push follower: what a poll costs
# Valkey and how far behind Valkey its answers are. One valkey-server (the module),
# INSTANCES queue-api instances, USERS people who entered through queue-api
# (POST /api/queue/entry) in a closed queue, polled at random across the instances
# by `queue-cli poll-load` over CONNS keep-alive connections for SECS seconds, while
# CHURN times a second someone leaves and enters again (every poller behind them
# moves): through queue-api's HTTP entry and leave, as people do (CHURN_VIA=api,
# the default), or by raw QUEUE.LEAVE / QUEUE.ENTER on Valkey (CHURN_VIA=valkey: a
# change the instances learn only from the change log). CHURN_KIND=again makes each
# of them one entry again without leaving (QUEUE.ENTER of someone waiting, with the
# nickname they had: the change log's `moved` tells every instance their new place)
# instead of a leave and an entry (CHURN_KIND=leave, the default).
#
# - Valkey time per poll: INFO commandstats after the round (reset before it), the
#   usec of the commands queue-api sends (QUEUE.* but QUEUE.ENTER and QUEUE.LEAVE,
#   the people's own writes, and the bench's QUEUE.STATUS; and the log reads XRANGE,
#   XREVRANGE) divided by the number of polls. The commands these call inside
#   (ZRANK, XADD) count in theirs. Goal with the follower: <= 50 ns, flat with 1 and
#   3 instances. The ratio polls:changes (polls per leave-and-enter) is printed with
#   it: a real line has hundreds (a poll every 3-5 s for many minutes per entry).
# - Lag: SAMPLERS threads poll too, reading QUEUE.STATUS just before and after; an
#   answer that is neither is polled again every 5 ms until it agrees with Valkey:
#   the time that took is how far behind it was (0 when it agreed). p99 goal <= 100 ms.
#
# Rounds with the follower (--status-from-follower true) and without (false) are
# interleaved, ROUNDS of each per instance count; the median and the spread
# (min..max) are printed.
#
# Binaries from env vars (defaults: this checkout's target/release, built when
# missing): API_BIN (queue-api), MODULE_SO (the module), CLI_BIN (queue-cli).
#
#   bash bench/poll-follow.sh                  # USERS=2000 CONNS=64 SECS=20 ROUNDS=3
#   REDUCED=1 bash bench/poll-follow.sh        # < 60 s; fails only when an answer
#                                              # never agreed with Valkey (2 s)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
REDUCED=${REDUCED:-0}
if [ "$REDUCED" = 1 ]; then
  USERS=${USERS:-300}; CONNS=${CONNS:-16}; SECS=${SECS:-6}; ROUNDS=${ROUNDS:-1}; CHURN=${CHURN:-20}
else
  USERS=${USERS:-2000}; CONNS=${CONNS:-64}; SECS=${SECS:-20}; ROUNDS=${ROUNDS:-3}; CHURN=${CHURN:-50}
fi
SAMPLERS=${SAMPLERS:-2}; CHURN_VIA=${CHURN_VIA:-api}; CHURN_KIND=${CHURN_KIND:-leave}
case "$CHURN_VIA" in api|valkey) ;; *) echo "CHURN_VIA must be api or valkey" >&2; exit 2 ;; esac
case "$CHURN_KIND" in leave|again) ;; *) echo "CHURN_KIND must be leave or again" >&2; exit 2 ;; esac
. "$root/bench/lib/valkey.sh"
pids=()
cleanup() { for p in "${pids[@]}" ${vpid:-}; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "${dir:-}"; }
trap cleanup EXIT
command -v valkey-server >/dev/null 2>&1 || bash "$root/scripts/install-deps.sh"
# Needs the release build (scripts/test.sh makes it); what is missing is built one
# package at a time, as the tests build them (no features unified anew).
API_BIN=${API_BIN:-$root/target/release/queue-api}
export MODULE_SO=${MODULE_SO:-$root/target/release/libvalkey_queue.so}
CLI_BIN=${CLI_BIN:-$root/target/release/queue-cli}
[ -e "$MODULE_SO" ] || (cd "$root" && cargo build --release -q -p valkey-queue)
[ -e "$API_BIN" ] || (cd "$root" && cargo build --release -q -p queue-api)
[ -e "$CLI_BIN" ] || (cd "$root" && cargo build --release -q -p queue-cli)
start_valkey
valkey-cli -p "$vport" QUEUE.CONFIG default SET soft_cap 0 abandon_after 600000 >/dev/null
api_ports=()
for mode in true false; do
  for i in 1 2 3; do
    p=$(port)
    "$API_BIN" --valkey-url "redis://127.0.0.1:$vport/" --listen "127.0.0.1:$p" \
      --rate-limit 0 --status-from-follower "$mode" >"$dir/api-$mode-$i.log" 2>&1 & pids+=($!)
    api_ports+=("$mode:$p")
  done
done
for entry in "${api_ports[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${entry#*:}/healthz" | grep -q '"up"' && break; sleep 0.1; done
done
python3 - "$vport" "$USERS" "$CONNS" "$SECS" "$ROUNDS" "$CHURN" "$SAMPLERS" "$CHURN_VIA:$CHURN_KIND" "$CLI_BIN" "$dir" "${api_ports[@]}" <<'EOF'
import json, random, socket, statistics, subprocess, sys, threading, time, urllib.request
vport, users, conns, secs, rounds, churn, samplers = (int(a) for a in sys.argv[1:8])
churn_via, cli, tmp = sys.argv[8:11]
churn_via, churn_kind = churn_via.split(":")
apis = {"true": [], "false": []}
for a in sys.argv[11:]:
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

def get(url, method="GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r: return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e: return e.code, json.loads(e.read() or b"{}")

def truth(r, u):
    st = r.call("QUEUE.STATUS", "default", u)
    d = dict(zip(st[::2], st[1::2])) if isinstance(st, list) else st
    return (str(d.get("status", "")).upper(), int(d.get("rank", 0) or 0))

def answer(body):
    return (str(body.get("status", "UNKNOWN")).upper(), int(body.get("rank", 0) or 0))

admin = Resp()
# Everyone enters through queue-api (an instance reading from Valkey: no instance
# knows anyone before the rounds' first polls).
people = []
for _ in range(users):
    code, body = get(f"{apis['false'][0]}/api/queue/entry", "POST", {"nickname": "n"})
    assert code == 200, (code, body)
    people.append(body["userId"])
users_file = f"{tmp}/users.txt"
with open(users_file, "w") as f: f.write("\n".join(people) + "\n")

def held_counts(bases):
    """Polls the instances read from Valkey, held for a registration, and held then read."""
    names = ("queue_api_status_from_valkey_total", "queue_api_status_held_total", "queue_api_status_held_read_total")
    out = [0, 0, 0]
    for base in bases:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                name, _, value = line.partition(" ")
                if name in names: out[names.index(name)] += int(float(value))
    return out

def round_once(mode, n_inst):
    bases = apis[mode][:n_inst]
    # Everyone's first poll at every instance (the load then picks both at random).
    for u in people:
        for base in bases: get(f"{base}/api/queue/status?userId={u}")
    time.sleep(1.5)  # registered with the followers
    held_before = held_counts(bases)
    admin.call("CONFIG", "RESETSTAT")
    stop = time.time() + secs; polls = [0]; lags = []; errors = []; lock = threading.Lock(); changes = [0]
    def sampler(k):
        r = Resp(); n = 0
        while time.time() < stop:
            u = random.choice(people); base = random.choice(bases); n += 1
            before = truth(r, u); code, body = get(f"{base}/api/queue/status?userId={u}"); after = truth(r, u)
            if code not in (200, 404): errors.append((code, body))
            got = answer(body) if code == 200 else ("UNKNOWN", 0)
            lo, hi = sorted((before[1], after[1]))
            if got == before or got == after or (got[0] == before[0] == after[0] and lo <= got[1] <= hi):
                lag = 0.0
            else:
                t0 = time.time(); lag = None
                while time.time() - t0 < 2.0:
                    now = truth(r, u); code, body = get(f"{base}/api/queue/status?userId={u}"); n += 1
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
            if churn_via == "api":
                base = bases[k % len(bases)]
                if churn_kind == "leave":
                    code, body = get(f"{base}/api/queue/entry?userId={out}", "DELETE")
                    if code != 200: errors.append(("leave", code, body))
                code, body = get(f"{base}/api/queue/entry", "POST", {"nickname": "n", "userId": out})
                if code != 200 or body.get("userId") != out: errors.append(("enter", code, body))
            else:
                if churn_kind == "leave": r.call("QUEUE.LEAVE", "default", out)
                r.call("QUEUE.ENTER", "default", out, "n")
            k += 1; time.sleep(1.0 / churn)
        changes[0] = k
    load = subprocess.Popen([cli, "poll-load", "--users-file", users_file, "--conns", str(conns), "--secs", str(secs)]
                            + [a for b in bases for a in ("--api", b)], stdout=subprocess.PIPE, text=True)
    ts = [threading.Thread(target=sampler, args=(k,)) for k in range(samplers)] + [threading.Thread(target=churner)]
    for t in ts: t.start()
    for t in ts: t.join()
    out, _ = load.communicate()
    got = json.loads(out.strip().splitlines()[-1])
    polls[0] += got["polls"]
    if got["other"] or got["failed"]: errors.append(("poll-load", got))
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
    read, held, held_read = (a - b for a, b in zip(held_counts(bases), held_before))
    print(f"  round instances={n_inst} from_follower={mode}: {polls[0]} polls, {changes[0]} re-entries "
          f"(polls:changes {polls[0] / max(1, changes[0]):.0f}:1): " + ", ".join(
        f"{k} {u * 1000.0 / max(1, polls[0]):.1f} ns/poll ({c} calls)" for k, (u, c) in top)
        + (f"; polls read from Valkey {read}, held {held} (then read {held_read})" if mode == "true" else ""),
        flush=True)
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0.0
    return usec * 1000.0 / max(1, polls[0]), p99 * 1000, polls[0], errors, polls[0] / max(1, changes[0])

results = {}
failed = []
for _ in range(rounds):
    for n_inst in (1, 3):
        for mode in ("true", "false"):
            ns, p99, n, errors, ratio = round_once(mode, n_inst)
            results.setdefault((n_inst, mode), []).append((ns, p99, n, ratio))
            if errors: failed.append(((n_inst, mode), errors[:5]))
print(f"{users} people, {conns} connections polling + {samplers} lag samplers, {churn} re-entries/s "
      f"({'left and entered' if churn_kind == 'leave' else 'entered again'} through {churn_via}), "
      f"{secs} s a round, {rounds} round(s)")
for (n_inst, mode), rs in sorted(results.items()):
    ns = [r[0] for r in rs]; p99 = [r[1] for r in rs]; n = [r[2] for r in rs]
    print(f"instances={n_inst} from_follower={mode:5}  Valkey ns/poll median {statistics.median(ns):8.1f} "
          f"({min(ns):.1f}..{max(ns):.1f})  lag p99 ms median {statistics.median(p99):6.1f} "
          f"({min(p99):.1f}..{max(p99):.1f})  polls/round {int(statistics.median(n))}  "
          f"polls:changes {statistics.median(r[3] for r in rs):.0f}:1")
if failed:
    print("FAIL: answers that never agreed with Valkey or errors:", failed); sys.exit(1)
print("ok: every answer agreed with Valkey")
EOF

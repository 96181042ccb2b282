#!/usr/bin/env python3
"""Module vs Lua library, side by side in one run on one server that has both.

Throughput of ENTER and STATUS (valkey-benchmark, -c 50 -P 16, medians of
interleaved rounds), throughput and server time of TICKET.CLAIM (pipelined from
here; server time from INFO commandstats), server time of PROMOTE MAX 1000, and
memory per waiting user. Prints figures and module/library ratios; a report, not
a test. Run it through bench/backends-bench.sh, which starts the server.
"""
import os
import re
import statistics
import subprocess
import sys
import time
import uuid

import valkey

PORT = int(os.environ["PORT"])
ROUNDS = int(os.environ.get("ROUNDS", "3"))
N = int(os.environ.get("N", "100000"))
STATUS_USERS = int(os.environ.get("STATUS_USERS", "100000"))
CLAIMS = int(os.environ.get("CLAIMS", "20000"))
PROMOTE_REPS = int(os.environ.get("PROMOTE_REPS", "7"))
MEM_USERS = int(os.environ.get("MEM_USERS", "200000"))
BENCH = os.environ.get("VALKEY_BENCHMARK", "valkey-benchmark")

r = valkey.Valkey(host="127.0.0.1", port=PORT)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cmd(backend, name, queue, *args):
    """The command line for a backend: QUEUE.X q ... or FCALL queue_x 1 q ..."""
    if backend == "module":
        return [name, queue, *args]
    return ["FCALL", name.lower().replace(".", "_"), "1", queue, *args]


def rps(argv, rand_range):
    out = subprocess.run(
        [BENCH, "-h", "127.0.0.1", "-p", str(PORT), "-c", "50", "-P", "16", "-n", str(N), "-r", str(rand_range), "-q", *argv],
        capture_output=True, text=True, check=True,
    ).stdout
    m = re.findall(r"([\d.]+) requests per second", out.replace("\r", "\n"))
    return float(m[-1])


def commandstat(name):
    stats = r.info("commandstats")
    return stats.get(f"cmdstat_{name}", {}).get("usec_per_call", float("nan"))


def pipeline_in_chunks(commands, chunk=1000):
    replies = []
    for i in range(0, len(commands), chunk):
        p = r.pipeline(transaction=False)
        for c in commands[i : i + chunk]:
            p.execute_command(*c)
        replies.extend(p.execute(raise_on_error=False))
    return replies


def fields(reply):
    it = iter(reply)
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in zip(it, it)}


results = []


def report(what, module, library, unit, higher_is_better):
    ratio = module / library if library else float("nan")
    results.append((what, module, library, unit, ratio, higher_is_better))


def throughput(label, name, args, rand_range):
    per = {"module": [], "lua": []}
    for _ in range(ROUNDS):
        for b, q in (("module", "bm"), ("lua", "bl")):
            per[b].append(rps(cmd(b, name, q, *args), rand_range))
    log(f"{label}: module {per['module']} lua {per['lua']}")
    report(label, statistics.median(per["module"]), statistics.median(per["lua"]), "rps", True)


def main():
    r.execute_command('FLUSHALL', 'SYNC')
    for q in ("bm", "bl"):
        r.execute_command(*cmd("module", "QUEUE.CONFIG", q, "SET", "soft_cap", "0", "abandon_after", "0"))
    throughput("ENTER", "QUEUE.ENTER", ["__rand_int__", "nick0001"], 100_000_000)

    r.execute_command('FLUSHALL', 'SYNC')
    for b, q in (("module", "bm"), ("lua", "bl")):
        r.execute_command(*cmd("module", "QUEUE.CONFIG", q, "SET", "soft_cap", "0", "abandon_after", "0"))
        pipeline_in_chunks([cmd(b, "QUEUE.ENTER", q, f"{i:012d}", "nick0001") for i in range(STATUS_USERS)])
    throughput("STATUS", "QUEUE.STATUS", ["__rand_int__"], STATUS_USERS)

    # CLAIM: every ENTER on a queue with room and nobody waiting is let in at once,
    # so ENTER hands out the tickets to claim.
    claim = {}
    for b, q in (("module", "cm"), ("lua", "cl")):
        r.execute_command(*cmd("module", "QUEUE.CONFIG", q, "SET", "soft_cap", "10000000", "ticket_ttl", "600000"))
        replies = pipeline_in_chunks([cmd(b, "QUEUE.ENTER", q, f"c{i}", "nick0001") for i in range(CLAIMS)])
        tickets = [fields(x)["ticketId"].decode() for x in replies]
        r.config_resetstat()
        start = time.perf_counter()
        out = pipeline_in_chunks([cmd(b, "TICKET.CLAIM", q, t) for t in tickets])
        elapsed = time.perf_counter() - start
        errors = [x for x in out if isinstance(x, Exception)]
        if errors:
            log(f"CLAIM {b}: {len(errors)} errors, first: {errors[0]}")
        claim[b] = (CLAIMS / elapsed, commandstat("ticket.claim" if b == "module" else "fcall"))
    report("CLAIM (pipelined from Python)", claim["module"][0], claim["lua"][0], "rps", True)
    report("CLAIM server time", claim["module"][1], claim["lua"][1], "us/call", False)

    # PROMOTE MAX 1000 from a line of 100k.
    r.execute_command('FLUSHALL', 'SYNC')
    for b, q in (("module", "pm"), ("lua", "pl")):
        r.execute_command(*cmd("module", "QUEUE.CONFIG", q, "SET", "soft_cap", "0"))
        pipeline_in_chunks([cmd(b, "QUEUE.ENTER", q, f"p{i:09d}", "nick0001") for i in range(100_000 + 1000 * PROMOTE_REPS)])
        r.execute_command(*cmd("module", "QUEUE.CONFIG", q, "SET", "soft_cap", "10000000", "batch_max", "100000"))
    times = {"module": [], "lua": []}
    for _ in range(PROMOTE_REPS):
        for b, q in (("module", "pm"), ("lua", "pl")):
            r.config_resetstat()
            got = fields(r.execute_command(*cmd(b, "QUEUE.PROMOTE", q, "MAX", "1000")))
            assert got["promoted"] == 1000, got
            times[b].append(commandstat("queue.promote" if b == "module" else "fcall"))
    log(f"PROMOTE us: module {times['module']} lua {times['lua']}")
    report("PROMOTE MAX 1000 server time", statistics.median(times["module"]), statistics.median(times["lua"]), "us/call", False)

    # Memory per waiting user: the same keys either way, measured all the same.
    per_user = {}
    for b, q in (("module", "mm"), ("lua", "ml")):
        r.execute_command('FLUSHALL', 'SYNC')
        r.execute_command(*cmd("module", "QUEUE.CONFIG", q, "SET", "soft_cap", "0"))
        before = r.info("memory")["used_memory"]
        ids = [str(uuid.uuid4()) for _ in range(MEM_USERS)]
        pipeline_in_chunks([cmd(b, "QUEUE.ENTER", q, u, "nick0001") for u in ids])
        per_user[b] = (r.info("memory")["used_memory"] - before) / MEM_USERS
    report(f"memory per waiting user ({MEM_USERS} users)", per_user["module"], per_user["lua"], "B", False)

    print()
    print(f"module vs Lua library (valkey {r.info('server')['valkey_version']}, {os.cpu_count()} cores)")
    print(f"ROUNDS={ROUNDS} N={N} -c 50 -P 16 STATUS_USERS={STATUS_USERS} CLAIMS={CLAIMS} PROMOTE_REPS={PROMOTE_REPS} MEM_USERS={MEM_USERS}")
    print(f"{'measurement':<40} {'module':>12} {'library':>12} {'unit':>8} {'module/library':>15}")
    for what, m, l, unit, ratio, _ in results:
        print(f"{what:<40} {m:>12.1f} {l:>12.1f} {unit:>8} {ratio:>15.3f}")
    print("(rps: higher is better; us/call and B: lower is better)")


if __name__ == "__main__":
    main()

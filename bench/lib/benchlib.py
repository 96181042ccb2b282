#!/usr/bin/env python3
"""Helper for bench/module-bench.sh: fills, server-time and memory measurements.

Every subcommand talks to one server on 127.0.0.1:PORT and prints machine-readable
`key=value` lines on stdout (human notes go to stderr). Exit status 0 on success,
1 when the server answered with an error (the exact error text is printed as
`error=...`), 2 on usage errors.

BACKEND=module (default) sends QUEUE.* commands as they are; BACKEND=lua rewrites
them through to_backend() into FCALL calls (hook for the Lua fallback, see below).
"""
import os
import socket
import statistics
import sys
import time
import uuid

try:
    import valkey
except ImportError:  # pragma: no cover - reported by the shell script
    print("error=python package 'valkey' is not installed (pip install valkey)")
    sys.exit(1)

BACKEND = os.environ.get("BACKEND", "module")
BATCH = int(os.environ.get("PIPELINE_BATCH", "2000"))


# --------------------------------------------------------------------------
# BACKEND HOOK (Lua fallback). Same mapping as qcmd() in module-bench.sh:
#   QUEUE.X Q args...  ->  FCALL queue_x 1 Q args...
# Not exercised yet; the Lua library does not exist at the time of writing.
# --------------------------------------------------------------------------
def to_backend(args):
    args = [str(a) for a in args]
    if BACKEND == "lua" and args and args[0].upper().startswith("QUEUE."):
        fn = "queue_" + args[0].split(".", 1)[1].lower()
        return ["FCALL", fn, "1"] + args[1:]
    return args


def stat_name(cmd):
    """commandstats entry that times `cmd` (e.g. QUEUE.PROMOTE -> cmdstat_queue.promote)."""
    cmd = cmd.lower()
    if BACKEND == "lua" and cmd.startswith("queue."):
        return "cmdstat_fcall"
    return "cmdstat_" + cmd


def conn(port):
    return valkey.Valkey(host="127.0.0.1", port=int(port), decode_responses=True,
                         socket_timeout=600)


def call(r, *args):
    return r.execute_command(*to_backend(args))


def fail(msg, code=1):
    print("error=" + str(msg).replace("\n", " "))
    sys.stdout.flush()
    sys.exit(code)


def run_pipeline(r, commands, total):
    """Send an iterable of argument lists in batches; return (#errors, first error)."""
    errors, first = 0, None
    pipe = r.pipeline(transaction=False)
    n = 0
    for args in commands:
        pipe.execute_command(*to_backend(args))
        n += 1
        if n % BATCH == 0 or n == total:
            for res in pipe.execute(raise_on_error=False):
                if isinstance(res, Exception):
                    errors += 1
                    if first is None:
                        first = str(res)
            pipe = r.pipeline(transaction=False)
    if len(pipe):
        for res in pipe.execute(raise_on_error=False):
            if isinstance(res, Exception):
                errors += 1
                if first is None:
                    first = str(res)
    return errors, first


def as_map(reply):
    """A RESP3 map or a RESP2 flat [k, v, k, v ...] reply as a dict (else None)."""
    if isinstance(reply, dict):
        return reply
    if isinstance(reply, (list, tuple)) and len(reply) % 2 == 0 and reply \
            and all(isinstance(k, str) for k in reply[0::2]):
        return dict(zip(reply[0::2], reply[1::2]))
    return None


def summarize(reply):
    m = as_map(reply)
    if m is not None and "promoted" in m:
        return ",".join("%s:%s" % kv for kv in m.items())
    if isinstance(reply, (list, tuple)):
        return "array[%d]" % len(reply)
    if isinstance(reply, dict):
        return "map[%d]" % len(reply)
    s = str(reply)
    return s if len(s) <= 60 else s[:57] + "..."


def used_memory(r):
    info = r.info("memory")
    return int(info["used_memory"]), int(info["used_memory_rss"])


# ---------------------------------------------------------------- subcommands
def cmd_freeport():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    print(port)


def cmd_call(port, *args):
    """Run one command; print reply=... or error=... (exit 1)."""
    r = conn(port)
    try:
        print("reply=" + summarize(call(r, *args)))
    except valkey.ResponseError as e:
        fail(e)


def cmd_config(port, key, *pairs):
    """QUEUE.CONFIG key SET f v [f v ...] (SET creates the queue when it is new)."""
    r = conn(port)
    args = ["QUEUE.CONFIG", key, "SET"] + list(pairs)
    try:
        call(r, *args)
        print("config=ok")
    except valkey.ResponseError as e:
        fail("%s: %s" % (" ".join(to_backend(args)), e))


def cmd_fill(port, kind, key, count, start="0"):
    """Fill `key` with members %012d for i in [start, start+count) -- the same form
    valkey-benchmark gives __rand_int__ -- as QUEUE.ENTER (kind=queue) or ZADD (zset)."""
    r = conn(port)
    count, start = int(count), int(start)
    t0 = time.time()
    if kind == "queue":
        gen = (("QUEUE.ENTER", key, "%012d" % i, "nick%04d" % (i % 10000))
               for i in range(start, start + count))
    elif kind == "zset":
        gen = (("ZADD", key, i, "%012d" % i) for i in range(start, start + count))
    else:
        fail("unknown kind " + kind, 2)
    errors, first = run_pipeline(r, gen, count)
    print("filled=%d\nerrors=%d\nseconds=%.1f" % (count, errors, time.time() - t0))
    if errors:
        fail("%d of %d %s commands failed, first: %s" % (errors, count, kind, first))


def cmd_servertime(port, reps, qkey, zkey, n):
    """Interleaved: RESETSTAT; QUEUE.PROMOTE qkey MAX n; read usec_per_call; then the
    same for ZPOPMIN zkey n. Repeated `reps` times; prints both series and medians
    (NA for a side whose command failed; its first error is printed as error=...)."""
    r = conn(port)
    reps, n = int(reps), int(n)
    sides = [
        ("promote", ["QUEUE.PROMOTE", qkey, "MAX", n], stat_name("QUEUE.PROMOTE")),
        ("zpopmin", ["ZPOPMIN", zkey, n], stat_name("ZPOPMIN")),
    ]
    times = {name: [] for name, _, _ in sides}
    last = {name: None for name, _, _ in sides}
    err = {}
    for _ in range(reps):
        for name, args, stat in sides:
            if name in err:
                continue
            r.config_resetstat()
            try:
                last[name] = call(r, *args)
            except valkey.ResponseError as e:
                err[name] = "%s: %s" % (" ".join(str(a) for a in to_backend(args)), e)
                continue
            st = r.info("commandstats").get(stat)
            if not st:
                err[name] = "no %s entry in INFO commandstats after %s" % (stat, args[0])
                continue
            times[name].append(float(st["usec_per_call"]))
    for name, _, _ in sides:
        ts = times[name]
        print("%s_usec=%s" % (name, ",".join("%.2f" % x for x in ts)))
        print("%s_median=%s" % (name, ("%.2f" % statistics.median(ts)) if ts and name not in err else "NA"))
        print("%s_last_reply=%s" % (name, summarize(last[name])))
    # A PROMOTE that issued fewer than n tickets times less work than ZPOPMIN n.
    m = as_map(last["promote"])
    if m is not None and "promoted" in m and int(m["promoted"]) != n and "promote" not in err:
        print("warning=last QUEUE.PROMOTE promoted %s users, not %d" % (m["promoted"], n))
    for name in err:
        print("error=" + err[name].replace("\n", " "))
    if err:
        sys.exit(1)


def cmd_mem(port, kind, key, users, seed="42"):
    """used_memory / used_memory_rss delta of `users` members with 36-char UUID ids:
    QUEUE.ENTER key <uuid> <8-char nick> (kind=queue) or ZADD key i <uuid> (kind=zset).
    The ids are derived from `seed`, so both kinds get exactly the same ids."""
    import random
    r = conn(port)
    users = int(users)
    rng = random.Random(int(seed))
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(users)]
    assert len(ids[0]) == 36
    time.sleep(0.2)
    before, rss_before = used_memory(r)
    t0 = time.time()
    if kind == "queue":
        gen = (("QUEUE.ENTER", key, u, "n%07d" % (i % 10000000)) for i, u in enumerate(ids))
    elif kind == "zset":
        gen = (("ZADD", key, i, u) for i, u in enumerate(ids))
    else:
        fail("unknown kind " + kind, 2)
    errors, first = run_pipeline(r, gen, users)
    secs = time.time() - t0
    del ids
    time.sleep(0.5)  # let client query buffers be released before sampling
    after, rss_after = used_memory(r)
    print("users=%d\nerrors=%d\nseconds=%.1f" % (users, errors, secs))
    print("used_delta=%d\nrss_delta=%d" % (after - before, rss_after - rss_before))
    print("bytes_per_user=%.1f" % ((after - before) / users))
    print("rss_bytes_per_user=%.1f" % ((rss_after - rss_before) / users))
    if errors:
        fail("%d of %d %s commands failed, first: %s" % (errors, users, kind, first))


def cmd_ranks(port, key, users, page="10000"):
    """Valkey time of one whole-line rank refresh of `key` (filled with `users`
    waiting users %012d): QUEUE.LINE pages of `page` walked to the end (what the push
    path calls), then QUEUE.RANKS of every user in calls of `page` (the old path,
    a six-field map per user), then ZRANK of every user on a plain zset of the same
    members for scale. Server time from INFO commandstats; prints ns per user."""
    import random
    r = conn(port)
    users, page = int(users), int(page)

    def usec(stat):
        st = r.info("commandstats").get(stat)
        return float(st["usec"]) if st else float("nan")

    r.config_resetstat()
    cursor, listed, calls = 0, 0, 0
    t0 = time.time()
    while True:
        rep = call(r, "QUEUE.LINE", key, cursor, page)
        listed += len(rep[4])
        calls += 1
        cursor = int(rep[1])
        if cursor == 0:
            break
    wall = time.time() - t0
    line_us = usec(stat_name("QUEUE.LINE"))
    print("line_calls=%d\nline_users=%d\nline_ms=%.1f\nline_wall_ms=%.1f" % (calls, listed, line_us / 1000, wall * 1000))
    print("line_ns_per_user=%.1f" % (line_us * 1000 / max(listed, 1)))
    ids = ["%012d" % i for i in range(users)]
    random.Random(7).shuffle(ids)
    r.config_resetstat()
    t0 = time.time()
    for i in range(0, users, page):
        call(r, "QUEUE.RANKS", key, *ids[i:i + page])
    wall = time.time() - t0
    ranks_us = usec(stat_name("QUEUE.RANKS"))
    print("ranks_ms=%.1f\nranks_wall_ms=%.1f\nranks_ns_per_user=%.1f" % (ranks_us / 1000, wall * 1000, ranks_us * 1000 / users))
    zkey = key + ":zset"
    run_pipeline(r, (("ZADD", zkey, i, "%012d" % i) for i in range(users)), users)
    r.config_resetstat()
    run_pipeline(r, (("ZRANK", zkey, u) for u in ids), users)
    z_us = usec("cmdstat_zrank")
    print("zrank_ns_per_user=%.1f" % (z_us * 1000 / users))
    r.delete(zkey)
    if listed != users:
        fail("QUEUE.LINE listed %d users, the line holds %d" % (listed, users))


def cmd_errors(port):
    print(conn(port).info("stats").get("total_error_replies", 0))


def main(argv):
    if len(argv) < 2:
        fail("usage: benchlib.py SUBCOMMAND args...", 2)
    sub, args = argv[1], argv[2:]
    table = {
        "freeport": cmd_freeport, "call": cmd_call, "config": cmd_config,
        "fill": cmd_fill, "servertime": cmd_servertime, "mem": cmd_mem,
        "errors": cmd_errors, "ranks": cmd_ranks,
    }
    if sub not in table:
        fail("unknown subcommand " + sub, 2)
    try:
        table[sub](*args)
    except valkey.ConnectionError as e:
        fail("connection: %s" % e)
    except TypeError as e:
        fail("bad arguments for %s: %s" % (sub, e), 2)


if __name__ == "__main__":
    main(sys.argv)

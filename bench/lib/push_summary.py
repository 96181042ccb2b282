#!/usr/bin/env python3
"""Summary of bench/push-scale.sh: reads its raw JSON lines (one per configuration,
phase and round, as `queue-cli watch drive` wrote them) and prints the table (medians
over rounds, min-max spread, the ratio of the largest instance count to the smallest)
and JSON lines (`{"kind":"run",...}` per run and phase, `{"kind":"summary",...}` per
table row, `{"kind":"ratio",...}`).

Which commands count: only top-level ones (names matching $TOP_LEVEL; EXEC never,
its commands count by name), since a module's or a function's nested calls are in
their caller's time too. The driver's commands (churn and probes) are CHURN below, by
name, or by function for FCALLs (their split from the slow log); everything else
top-level was sent by queue-api: the push cost.
"""
import json
import os
import re
import statistics
import sys

TOP = re.compile(os.environ.get("TOP_LEVEL", r"^(queue\.|ticket\.|session\.|fcall|fcall_ro|publish|ping|hello|select|multi|xread|xrange|xrevrange|xlen|xinfo|echo)"))
CHURN = {"queue.enter", "queue.leave", "queue.promote", "queue.config", "queue.status", "ticket.claim", "publish",
         "multi", "echo", "queue_enter", "queue_leave", "queue_promote", "queue_config", "queue_status", "ticket_claim"}


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def derive(r):
    secs = r["secs"]
    per = {}  # command (or FCALL function) -> [calls, usec]
    for name, (calls, usec) in r["cmdstats"].items():
        if name == "exec" or not TOP.search(name):
            continue
        if name in ("fcall", "fcall_ro") and r.get("fcall_split"):
            continue
        per[name] = [calls, usec]
    for fn, (calls, usec) in (r.get("fcall_split") or {}).items():
        per["fcall " + fn] = [calls, usec]
    churn = sum(u for n, (c, u) in per.items() if n.split(" ")[-1] in CHURN)
    total = sum(u for c, u in per.values())
    push = total - churn
    push_calls = sum(c for n, (c, u) in per.items() if n.split(" ")[-1] not in CHURN)
    # The floor: the driver's ECHO every 200 ms, what any command sent that rarely costs.
    floor = per.get("echo")
    s0, s1 = r["streams_start"], r["streams_end"]
    streams = (s0.get("open", 0) + s1.get("open", 0)) / 2
    lat_l, lat_p = r.get("lat_leave_ms") or [], r.get("lat_promote_ms") or []
    ch = r["churn"]
    events = s1.get("events", 0) - s0.get("events", 0)
    opened = max(s0.get("open", 0), 1)
    rss = (r.get("api_rss_streams_kb", 0) - r.get("api_rss_base_kb", 0)) if r.get("api_rss_base_kb") else None
    return {
        "kind": "run", "phase": r["phase"], "instances": r["instances"], "round": r["round"],
        "line": r["line"], "streams": round(streams), "secs": round(secs, 2),
        "push_ns_per_person_s": round(push * 1000 / secs / streams, 1) if streams else None,
        "total_ns_per_person_s": round(total * 1000 / secs / streams, 1) if streams else None,
        "push_ms_per_s": round(push / secs / 1000, 2),
        "push_calls_per_s": round(push_calls / secs, 1),
        "floor_us_per_call": round(floor[1] / floor[0], 1) if floor and floor[0] else None,
        "churn_ms_per_s": round(churn / secs / 1000, 2),
        "total_ms_per_s": round(total / secs / 1000, 2),
        "main_thread_ms_per_s": round(r["cpu_main_s"] * 1000 / secs, 1),
        "events_per_s": round(events / secs),
        # queue-api's CPU (all instances, user and system) over the window per event
        # sent, and its resident memory for the open streams per stream.
        "api_cores": round(r["api_cpu_s"] / secs, 3) if "api_cpu_s" in r else None,
        "api_us_per_event": round(r["api_cpu_s"] * 1e6 / events, 1) if events and "api_cpu_s" in r else None,
        "api_kib_per_stream": round(rss / opened, 2) if rss is not None else None,
        "leave_p50_ms": pct(lat_l, 50), "leave_p99_ms": pct(lat_l, 99), "leave_n": len(lat_l),
        "leave_timeouts": r.get("leave_timeouts", 0),
        "promote_p50_ms": pct(lat_p, 50), "promote_p99_ms": pct(lat_p, 99), "promote_n": len(lat_p),
        "promote_timeouts": r.get("promote_timeouts", 0),
        "turn_p50_ms": pct(r.get("lat_turn_ms") or [], 50), "turn_p99_ms": pct(r.get("lat_turn_ms") or [], 99),
        "turn_n": len(r.get("lat_turn_ms") or []), "turn_timeouts": r.get("turn_timeouts", 0),
        "entered_per_s": round(ch["entered"] / secs), "leaves_per_s": round(ch["leaves"] / secs),
        "left_per_s": round(ch["left"] / secs),
        "promoted_per_s": round(ch["promoted"] / secs),
        "commands": {n: {"calls_per_s": round(c / secs, 1), "us_per_s": round(u / secs), "us_per_call": round(u / c, 2) if c else None}
                     for n, (c, u) in sorted(per.items(), key=lambda kv: -kv[1][1])},
    }


def fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def main(path):
    runs = [derive(json.loads(l)) for l in open(path) if l.strip()]
    for r in runs:
        print(json.dumps(r))
    cols = [("streams", "streams", 0), ("push_ns_per_person_s", "push ns/person/s", 1),
            ("total_ns_per_person_s", "all ns/person/s", 1), ("push_ms_per_s", "push ms/s", 2),
            ("push_calls_per_s", "push calls/s", 1), ("floor_us_per_call", "echo us", 1),
            ("churn_ms_per_s", "churn ms/s", 2), ("main_thread_ms_per_s", "main thr ms/s", 1),
            ("events_per_s", "events/s", 0), ("api_cores", "api cores", 2),
            ("api_us_per_event", "api us/event", 1), ("api_kib_per_stream", "api KiB/stream", 2), ("leave_p50_ms", "leave p50 ms", 1), ("leave_p99_ms", "leave p99 ms", 1),
            ("promote_p50_ms", "promote p50 ms", 1), ("promote_p99_ms", "promote p99 ms", 1),
            ("turn_p50_ms", "turn p50 ms", 1), ("turn_p99_ms", "turn p99 ms", 1),
            ("promoted_per_s", "promoted/s", 0)]
    groups = {}
    for r in runs:
        groups.setdefault((r["phase"], r["instances"]), []).append(r)
    summary = {}
    table = []
    for (phase, inst) in sorted(groups, key=lambda k: (k[0] != "steady", k[1])):
        rs = groups[(phase, inst)]
        row = {"kind": "summary", "phase": phase, "instances": inst, "rounds": len(rs)}
        cells = []
        for key, _, nd in cols:
            vals = [r[key] for r in rs if r[key] is not None]
            if not vals:
                row[key] = None
                cells.append("-")
                continue
            med = statistics.median(vals)
            row[key] = {"median": med, "min": min(vals), "max": max(vals)}
            cell = fmt(float(med), nd) if nd else str(round(med))
            if len(vals) > 1:
                cell += f" ({fmt(float(min(vals)), nd) if nd else round(min(vals))}-{fmt(float(max(vals)), nd) if nd else round(max(vals))})"
            cells.append(cell)
        # per command: medians of us/s and us/call
        cmds = {}
        for r in rs:
            for n, c in r["commands"].items():
                cmds.setdefault(n, []).append(c)
        row["commands"] = {n: {"us_per_s": statistics.median([c["us_per_s"] for c in cs]),
                               "calls_per_s": statistics.median([c["calls_per_s"] for c in cs]),
                               "us_per_call": statistics.median([c["us_per_call"] for c in cs if c["us_per_call"] is not None] or [0])}
                           for n, cs in cmds.items()}
        summary[(phase, inst)] = row
        table.append([phase, str(inst), str(len(rs))] + cells)
    ratios = []
    insts = sorted({i for _, i in groups})
    if len(insts) > 1:
        lo, hi = insts[0], insts[-1]
        for phase in ("steady", "churn"):
            a, b = summary.get((phase, lo)), summary.get((phase, hi))
            if not a or not b:
                continue
            rr = {"kind": "ratio", "phase": phase, "of": f"{hi}/{lo}"}
            for key in ("push_ns_per_person_s", "push_ms_per_s", "total_ms_per_s", "main_thread_ms_per_s"):
                x = (a.get(key) or {}) if key != "total_ms_per_s" else None
                if key == "total_ms_per_s":
                    xa = statistics.median([r[key] for r in groups[(phase, lo)]])
                    xb = statistics.median([r[key] for r in groups[(phase, hi)]])
                else:
                    xa, xb = (a.get(key) or {}).get("median"), (b.get(key) or {}).get("median")
                rr[key] = round(xb / xa, 2) if xa and xb else None
            ratios.append(rr)
    print()
    print("medians over rounds (min-max); Valkey time from INFO commandstats (top-level commands); push = sent by queue-api;")
    print("ns/person/s = Valkey time per second / open streams; main thr = Valkey main thread's CPU (INFO cpu);")
    print("push calls/s = commands queue-api sent per second (all instances); echo us = Valkey time of one ECHO sent")
    print("every 200 ms by the driver (what any command sent that rarely costs on this machine: not push)")
    heads = ["phase", "I", "n"] + [h for _, h, _ in cols]
    widths = [max(len(x[c]) for x in [heads] + table) for c in range(len(heads))]
    for x in [heads] + table:
        print(" ".join(v.ljust(w) if c == 0 else v.rjust(w) for c, (v, w) in enumerate(zip(x, widths))))
    asked = {k: float(os.environ.get(k.upper(), "0") or 0) for k in ("enter_rate", "leave_rate", "promote_rate")}
    for r in runs:
        if r["phase"] != "churn":
            continue
        got = {"enter_rate": r["entered_per_s"], "leave_rate": r["leaves_per_s"], "promote_rate": r["promoted_per_s"]}
        if any(asked[k] and got[k] < 0.9 * asked[k] for k in asked):
            print(f"note: round {r['round']}, I={r['instances']}: the churn fell short: {got['enter_rate']} entries/s, "
                  f"{got['leave_rate']} leaves/s, {got['promote_rate']} promotions/s (asked {asked['enter_rate']:g}, "
                  f"{asked['leave_rate']:g}, {asked['promote_rate']:g}): the driver fell behind (the machine short of CPU?)")
    for rr in ratios:
        print(f"ratio {rr['of']} instances, {rr['phase']}: push ns/person/s x{fmt(rr['push_ns_per_person_s'], 2)}, "
              f"push ms/s x{fmt(rr['push_ms_per_s'], 2)}, all commands ms/s x{fmt(rr['total_ms_per_s'], 2)}, "
              f"main thread x{fmt(rr['main_thread_ms_per_s'], 2)}")
    print()
    print("per command (medians): calls/s, Valkey us/s, us/call")
    for (phase, inst), row in sorted(summary.items(), key=lambda kv: (kv[0][0] != "steady", kv[0][1])):
        parts = [f"{n} {fmt(c['calls_per_s'], 1)}/s {round(c['us_per_s'])}us/s {fmt(c['us_per_call'], 2)}us"
                 for n, c in sorted(row["commands"].items(), key=lambda kv: -kv[1]["us_per_s"])]
        print(f"  {phase:<7} I={inst}: " + "; ".join(parts))
    print()
    for row in summary.values():
        print(json.dumps(row))
    for rr in ratios:
        print(json.dumps(rr))


if __name__ == "__main__":
    main(sys.argv[1])

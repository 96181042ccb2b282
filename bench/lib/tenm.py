#!/usr/bin/env python3
"""Support code for bench/ten-million.sh (no third-party packages: raw RESP over a socket).

  tenm.py gen BACKEND QUEUE START COUNT     the ENTER commands of people START..START+COUNT-1
                                            as RESP on stdout, for `valkey-cli --pipe`
  tenm.py id I                              person I's userId
  tenm.py line BACKEND PORT QUEUE PAGE      walks the whole line with QUEUE.LINE pages of
                                            PAGE; prints users=, pages=, wall_ms=
  tenm.py stats PORT                        INFO commandstats as `name calls usec` lines
  tenm.py repeat BACKEND PORT SECONDS MAXCALLS NAME QUEUE [ARGS...]
                                            the queue command NAME over and over on one
                                            connection for SECONDS (MAXCALLS at most);
                                            prints calls=

A person's userId is 36 characters shaped like a UUID, the last 12 being the number
zero-padded: the same as valkey-benchmark's __rand_int__ in ID_PREFIX__rand_int__, so
that a benchmark with -r COUNT asks about people who are in the line.
"""
import socket
import sys
import time

ID_PREFIX = "00000000-0000-4000-8000-"


def person(i):
    return "%s%012d" % (ID_PREFIX, i)


def command(backend, name, queue, *args):
    """QUEUE.NAME queue args..., or FCALL queue_name 1 queue args... for the Lua library."""
    if backend == "lua":
        return ["FCALL", "queue_" + name.lower(), "1", queue] + list(args)
    return ["QUEUE." + name.upper(), queue] + list(args)


def resp(args):
    out = ["*%d\r\n" % len(args)]
    for a in args:
        b = str(a)
        out.append("$%d\r\n%s\r\n" % (len(b.encode()), b))
    return "".join(out)


def cmd_gen(backend, queue, start, count):
    start, count = int(start), int(count)
    w = sys.stdout
    buf = []
    for i in range(start, start + count):
        buf.append(resp(command(backend, "ENTER", queue, person(i), "nick%04d" % (i % 10000))))
        if len(buf) == 10000:
            w.write("".join(buf))
            buf = []
    w.write("".join(buf))
    w.flush()


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", int(port)))
        self.f = self.s.makefile("rb", buffering=1 << 20)

    def call(self, *args):
        self.s.sendall(resp(args).encode())
        return self.read()

    def read(self):
        line = self.f.readline()
        if not line:
            raise EOFError("connection closed")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2].decode()
        if t in (b"*", b"%"):
            n = int(rest)
            if n < 0:
                return None
            n = n * 2 if t == b"%" else n
            return [self.read() for _ in range(n)]
        if t == b"_":
            return None
        raise RuntimeError("unexpected reply type %r" % line)


def cmd_line(backend, port, queue, page):
    c = Conn(port)
    cursor, users, pages = 0, 0, 0
    t0 = time.time()
    while True:
        reply = c.call(*command(backend, "LINE", queue, cursor, page))
        pages += 1
        users += len(reply[4])
        cursor = int(reply[1])
        if cursor == 0:
            break
    print("users=%d\npages=%d\nwall_ms=%.1f" % (users, pages, (time.time() - t0) * 1000))


def cmd_stats(port):
    c = Conn(port)
    for line in c.call("INFO", "commandstats").splitlines():
        if not line.startswith("cmdstat_"):
            continue
        name, fields = line[len("cmdstat_"):].split(":", 1)
        kv = dict(f.split("=", 1) for f in fields.split(","))
        print(name, kv["calls"], kv["usec"])


def cmd_repeat(backend, port, seconds, maxcalls, name, queue, *args):
    c = Conn(port)
    calls, end = 0, time.time() + float(seconds)
    while time.time() < end and calls < int(maxcalls):
        c.call(*command(backend, name, queue, *args))
        calls += 1
    print("calls=%d" % calls)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    what, args = argv[1], argv[2:]
    if what == "gen":
        cmd_gen(*args)
    elif what == "id":
        print(person(int(args[0])))
    elif what == "line":
        cmd_line(*args)
    elif what == "stats":
        cmd_stats(*args)
    elif what == "repeat":
        cmd_repeat(*args)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Entry flood against a running queue-api (helper of bench/flood.sh).

  flood.py HOST:PORT FIRST_ADDR ADDRS CONNS SECONDS

CONNS keep-alive connections, spread over ADDRS loopback source addresses counted
up from FIRST_ADDR (e.g. 127.0.3.1), each sending POST /api/queue/entry as fast as
the answers come back, for SECONDS. Prints one line of JSON: requests sent and the
answers by status code.
"""
import asyncio
import ipaddress
import json
import sys
import time

BODY = b'{"nickname":"flood"}'


def request(host):
    return (b"POST /api/queue/entry HTTP/1.1\r\nHost: " + host.encode() +
            b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(BODY)).encode() +
            b"\r\n\r\n" + BODY)


async def read_answer(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "connection" and value.strip().lower() == "close":
            close = True
    if length:
        await reader.readexactly(length)
    return status, close


async def worker(host, port, source, deadline, counts, sent):
    req = request(f"{host}:{port}")
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError as e:
            counts["connect_error"] = counts.get("connect_error", 0) + 1
            await asyncio.sleep(0.05)
            continue
        try:
            while time.monotonic() < deadline:
                writer.write(req)
                sent[0] += 1
                status, close = await read_answer(reader)
                counts[str(status)] = counts.get(str(status), 0) + 1
                if close:
                    break
        except (OSError, asyncio.IncompleteReadError, ValueError):
            counts["dropped"] = counts.get("dropped", 0) + 1
        finally:
            writer.close()


async def main():
    target, first, addrs, conns, seconds = sys.argv[1:6]
    host, port = target.rsplit(":", 1)
    first = ipaddress.ip_address(first)
    addrs, conns = int(addrs), int(conns)
    deadline = time.monotonic() + float(seconds)
    counts, sent = {}, [0]
    sources = [str(first + (i % addrs)) for i in range(conns)]
    await asyncio.gather(*(worker(host, int(port), s, deadline, counts, sent) for s in sources))
    print(json.dumps({"sent": sent[0], "answers": counts}))


asyncio.run(main())

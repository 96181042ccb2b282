"""The latency of a visitor's first request on an idle queue (straight through: one
QUEUE.PASS, the token set on the app's answer) against a request with a token, through
the same gate on one kept-alive connection each, interleaved.

    python3 bench/lib/first_request.py PORT PATH COOKIE COUNT

COOKIE is `name=token` of an admitted person. Every first request is sent without a
cookie and must reach the app (200) with a Set-Cookie; every request with the token
must reach it too. Prints one line: `first_p50_us first_p99_us token_p50_us
token_p99_us count`.
"""

import http.client
import sys
import time


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    port, path, cookie, count = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    first_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    token_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    html = {"Accept": "text/html"}
    first, token = [], []
    for i in range(count + 10):
        started = time.perf_counter()
        first_conn.request("GET", path, headers=html)
        r = first_conn.getresponse()
        r.read()
        took = time.perf_counter() - started
        if r.status != 200 or not (r.getheader("set-cookie") or "").startswith(cookie.split("=")[0] + "="):
            sys.exit(f"first request {i}: {r.status}, Set-Cookie {r.getheader('set-cookie')!r}: not let straight in")
        if i >= 10:
            first.append(took)
        started = time.perf_counter()
        token_conn.request("GET", path, headers={**html, "Cookie": cookie})
        r = token_conn.getresponse()
        r.read()
        took = time.perf_counter() - started
        if r.status != 200:
            sys.exit(f"request with a token {i}: {r.status}")
        if i >= 10:
            token.append(took)
    us = lambda v: v * 1e6
    print(
        f"{us(percentile(first, 50)):.0f} {us(percentile(first, 99)):.0f} "
        f"{us(percentile(token, 50)):.0f} {us(percentile(token, 99)):.0f} {count}"
    )


main()

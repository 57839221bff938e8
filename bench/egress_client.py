"""Runs INSIDE a sandbox for bench_egress.py: N requests on one keep-alive TLS connection to
api.example.test:8443 (latency of each, after the handshake), then one bulk download.
Trusts $BENCH_CA when set (the plain relay: the fake internet's CA), else the system's
default (the intercepting relay: the bundle with the Cordon CA). Prints one JSON object."""

import json
import os
import socket
import ssl
import sys
import time


def read_response(s, buf):
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise EOFError
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    got = len(rest)
    while got < n:
        d = s.recv(1 << 20)
        if not d:
            raise EOFError
        got += len(d)
    return (rest[n:] if len(rest) > n else b""), n


def main():
    n, bulk = int(sys.argv[1]), int(sys.argv[2])
    ca = os.environ.get("BENCH_CA")
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    raw = socket.create_connection(("api.example.test", 8443), timeout=30)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    s = ctx.wrap_socket(raw, server_hostname="api.example.test")
    hs = time.perf_counter() - t0
    req = b"GET /bench HTTP/1.1\r\nHost: api.example.test:8443\r\nAuthorization: Bearer " + \
        os.environ.get("API_KEY", "none").encode() + b"\r\n\r\n"
    lat, buf = [], b""
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(req)
        buf, _ = read_response(s, buf)
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    s.sendall(f"GET /bulk/{bulk} HTTP/1.1\r\nHost: api.example.test:8443\r\n\r\n".encode())
    buf, got = read_response(s, buf)
    dt = time.perf_counter() - t
    lat.sort()
    print(json.dumps({"handshake_ms": hs * 1e3, "p50_ms": lat[len(lat) // 2] * 1e3,
                      "p90_ms": lat[int(len(lat) * 0.9)] * 1e3, "bulk_mib_s": got / dt / (1 << 20)}))


main()

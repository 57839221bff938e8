"""Probes for the secrets tests, run INSIDE a sandbox (bound in as /secretclient.py). Stdlib.

    python3 /secretclient.py '[{"op": "req", ...}, ...]'   prints one JSON list of results

Each probe's request carries the placeholder found in the environment variable named by
o["var"] wherever "{PH}" appears in its path, headers or body. TLS is verified with the
system's default trust (SSL_CERT_FILE, set by cordon run): the sandbox trusts the Cordon CA
and nothing the test added. "world" returns what the sandbox can see of itself (environment,
/proc, its writable files), for the test to search for the real value.
"""

import json
import os
import socket
import ssl
import sys
import time

TIMEOUT = 5


def fill(s, ph):
    return s.replace("{PH}", ph) if isinstance(s, str) else s


def read_all(sock):
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, OSError):
        pass
    return data


def op_req(o):
    ph = os.environ.get(o.get("var", "API_KEY"), "")
    host = fill(o.get("host", o.get("sni", "api.example.test")), ph)
    path = fill(o.get("path", "/"), ph)
    body = fill(o.get("body", ""), ph).encode()
    lines = [f"{o.get('method', 'GET')} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{fill(k, ph)}: {fill(v, ph)}" for k, v in o.get("headers", {}).items()]
    if o.get("pad"):
        body += b"x" * o["pad"]
    if o.get("chunked"):
        lines.append("Transfer-Encoding: chunked")
        body = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    elif body or o.get("method") == "POST":
        lines.append(f"Content-Length: {len(body)}")
    req = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    res = {"op": "req", "reached": False}
    try:
        raw = socket.create_connection((o.get("connect", o.get("sni", "api.example.test")),
                                        o.get("port", 443 if o.get("tls", True) else 80)),
                                       timeout=o.get("timeout", TIMEOUT))
        s = raw
        if o.get("tls", True):
            ctx = ssl.create_default_context()
            if o.get("alpn"):
                ctx.set_alpn_protocols(o["alpn"])
            s = ctx.wrap_socket(raw, server_hostname=o.get("sni", "api.example.test"))
            res["alpn"] = s.selected_alpn_protocol()
        s.sendall(req)
        data = read_all(s)
        s.close()
        head, _, b = data.partition(b"\r\n\r\n")
        res["status_line"] = head.split(b"\r\n")[0].decode(errors="replace")
        res["raw"] = data.decode(errors="replace")
        try:
            res["json"] = json.loads(b.decode())
            res["reached"] = bool(res["json"].get("fakenet"))
        except ValueError:
            pass
    except Exception as e:  # noqa: BLE001 - a probe never raises
        res["error"] = f"{type(e).__name__}: {e}"
    return res


def op_resolve(o):
    ph = os.environ.get(o.get("var", "API_KEY"), "")
    name = fill(o["name"], ph)
    try:
        socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)
        return {"op": "resolve", "resolved": True}
    except OSError as e:
        return {"op": "resolve", "resolved": False, "error": str(e)}


def op_world(o):
    out = {"op": "world", "env": dict(os.environ)}
    for p in ("/proc/self/environ", "/proc/self/cmdline", "/proc/1/environ", "/proc/1/cmdline"):
        try:
            with open(p, "rb") as f:
                out[p] = f.read().decode(errors="replace")
        except OSError as e:
            out[p] = str(e)
    files = {}
    big = o.get("max", 1 << 20)  # files of this size or more are skipped
    for top in o.get("tops", ("/tmp", "/run", "/home", "/root", "/etc")):
        for d, _, names in os.walk(top):
            for n in names:
                p = os.path.join(d, n)
                if p in o.get("skip", ()):  # the file the results go to
                    continue
                try:
                    if os.path.getsize(p) < big:
                        with open(p, "rb") as f:
                            files[p] = f.read().decode(errors="replace")
                except OSError:
                    pass
    out["files"] = files
    return out


def op_bulk(o):
    """GET /bulk/N on the keep-alive server (8443), read slowly: the proxy must hold back
    rather than buffer what the server sends faster."""
    ctx = ssl.create_default_context()
    s = ctx.wrap_socket(socket.create_connection(("api.example.test", 8443), timeout=30),
                        server_hostname="api.example.test")
    s.sendall(f"GET /bulk/{o['n']} HTTP/1.1\r\nHost: api.example.test:8443\r\nConnection: close\r\n\r\n".encode())
    got = 0
    while True:
        d = s.recv(1 << 16)
        if not d:
            break
        got += len(d)
        time.sleep(o.get("sleep", 0.002))
    return {"op": "bulk", "bytes": got}


def op_par(o):
    """Its "ops" at once, each in a thread (requests held for approval side by side)."""
    import threading
    out = [None] * len(o["ops"])

    def one(i):
        t = time.monotonic()
        out[i] = dict(OPS[o["ops"][i]["op"]](o["ops"][i]), elapsed=round(time.monotonic() - t, 3))
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(o["ops"]))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"op": "par", "results": out}


def op_hold(o):
    """Opens o["n"] connections at once, each with the start of a request head only (the proxy
    waits for the rest), and counts those the proxy keeps open and those it closed."""
    socks = []
    for _ in range(o["n"]):
        s = socket.create_connection((o.get("host", "api.example.test"), o.get("port", 80)), timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\n")
        socks.append(s)
    time.sleep(1)
    open_, refused = 0, 0
    for s in socks:
        s.settimeout(0.5)
        try:
            refused += s.recv(1) == b""
        except socket.timeout:
            open_ += 1
        except OSError:
            refused += 1
        s.close()
    return {"op": "hold", "open": open_, "refused": refused}


def op_sleep(o):
    time.sleep(o["s"])
    return {"op": "sleep"}


OPS = {"hold": op_hold, "par": op_par, "sleep": op_sleep, "req": op_req, "resolve": op_resolve, "world": op_world, "bulk": op_bulk}

if __name__ == "__main__":
    ops = json.loads(sys.argv[1])
    out = []
    for o in ops:
        t = time.monotonic()
        out.append(dict(OPS[o["op"]](o), elapsed=round(time.monotonic() - t, 3)))
    print(json.dumps(out))

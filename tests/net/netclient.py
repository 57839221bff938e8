"""Network probes run INSIDE a sandbox (bound in read-only as /netclient.py). Stdlib only.

    python3 /netclient.py '[{"op": "http", ...}, ...]'    runs each probe, prints one JSON list
    python3 /netclient.py flood IP PORT N HOLD_S         opens N echo connections at once
    python3 /netclient.py serve PORT SECONDS             HTTP server on 0.0.0.0:PORT

A probe never raises: its result says what happened. "reached" is true only when an answer
from one of the fake internet's servers came back (its JSON body, or the echoed bytes), so a
probe that is blocked in any way (refused, reset, timed out, no route, bad certificate when
verification is off...) reads reached=false, and one that leaks always reads reached=true.
"""

import errno
import http.server
import json
import os
import random
import resource
import selectors
import socket
import ssl
import struct
import sys
import time
import urllib.request

TIMEOUT = float(os.environ.get("NETCLIENT_TIMEOUT", "4"))
CA = os.environ.get("NETCLIENT_CA", "/ca.pem")


def err(e):
    return f"{type(e).__name__}: {e}"


def read_http(sock):
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        j = json.loads(body.decode())
    except ValueError:
        j = None
    return head.decode(errors="replace"), j, data


def target(o):
    """o["connect"], where "@gateway" is the sandbox's next hop (the host end of its veth:
    the sandbox end is .2 of a /30, the host end .1)."""
    c = o["connect"]
    if c == "@gateway":
        a = op_myaddr({})["addr"]
        if a is None:
            raise OSError("no address toward the default route")
        p = a.split(".")
        c = ".".join(p[:3] + [str(int(p[3]) - 1)])
    return (c, o.get("port", 80))


def request(sock, host, path):
    sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: netclient\r\n\r\n".encode())


def op_http(o):
    r = {"reached": False}
    try:
        with socket.create_connection(target(o), timeout=o.get("timeout", TIMEOUT)) as s:
            r["connected"] = True
            request(s, o["host"], o["path"])
            head, body, raw = read_http(s)
            r["head"] = head[:200]
            r["bytes"] = len(raw)
            if isinstance(body, dict) and body.get("fakenet"):
                r["reached"], r["body"] = True, body
    except Exception as e:  # noqa: BLE001 - every failure is a result
        r["error"] = err(e)
    return r


def tls_ctx(verify):
    if verify:
        ctx = ssl.create_default_context(cafile=CA)
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def op_https(o):
    r = {"reached": False}
    try:
        ctx = tls_ctx(o.get("verify", True))
        with socket.create_connection((o["connect"], o.get("port", 443)), timeout=TIMEOUT) as raw:
            r["connected"] = True
            with ctx.wrap_socket(raw, server_hostname=o["sni"]) as s:
                r["handshake"] = True
                request(s, o.get("host", o["sni"]), o["path"])
                head, body, data = read_http(s)
                r["head"] = head[:200]
                if isinstance(body, dict) and body.get("fakenet"):
                    r["reached"], r["body"] = True, body
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_http_split(o):
    """HTTP whose request head arrives in two TCP segments, o["gap"] seconds apart."""
    r = {"reached": False}
    try:
        with socket.create_connection(target(o), timeout=TIMEOUT) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            req = f"GET {o['path']} HTTP/1.0\r\nHost: {o['host']}\r\n\r\n".encode()
            cut = o.get("cut", 10)
            s.sendall(req[:cut])
            time.sleep(o.get("gap", 0.3))
            s.sendall(req[cut:])
            head, body, _ = read_http(s)
            if isinstance(body, dict) and body.get("fakenet"):
                r["reached"], r["body"] = True, body
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_https_split(o):
    """TLS whose ClientHello arrives in two TCP segments (cut at o["cut"]), o["gap"] apart."""
    r = {"reached": False}
    try:
        obj_in, obj_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = tls_ctx(o.get("verify", True)).wrap_bio(obj_in, obj_out, server_hostname=o["sni"])
        with socket.create_connection(target(dict(o, port=o.get("port", 443))), timeout=TIMEOUT) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                pass
            hello = obj_out.read()
            cut = o.get("cut", 60)
            s.sendall(hello[:cut])
            time.sleep(o.get("gap", 0.3))
            s.sendall(hello[cut:])
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    if obj_out.pending:
                        s.sendall(obj_out.read())
                    d = s.recv(65536)
                    if not d:
                        raise ConnectionError("closed during the handshake")
                    obj_in.write(d)
            if obj_out.pending:
                s.sendall(obj_out.read())
            tls.write(f"GET {o['path']} HTTP/1.0\r\nHost: {o['sni']}\r\n\r\n".encode())
            s.sendall(obj_out.read())
            data = b""
            while True:
                try:
                    data += tls.read(65536)
                except ssl.SSLWantReadError:
                    d = s.recv(65536)
                    if not d:
                        break
                    obj_in.write(d)
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    break
            body = json.loads(data.partition(b"\r\n\r\n")[2].decode() or "null")
            if isinstance(body, dict) and body.get("fakenet"):
                r["reached"], r["body"] = True, body
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_urllib(o):
    r = {"reached": False}
    try:
        ctx = ssl.create_default_context(cafile=CA)
        with urllib.request.urlopen(o["url"], timeout=TIMEOUT, context=ctx) as resp:
            body = json.loads(resp.read().decode())
            if isinstance(body, dict) and body.get("fakenet"):
                r["reached"], r["body"] = True, body
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_resolve(o):
    r = {"ok": False}
    try:
        infos = socket.getaddrinfo(o["name"], o.get("port", 80), socket.AF_INET, socket.SOCK_STREAM)
        r["ok"], r["addrs"] = True, sorted({i[4][0] for i in infos})
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_echo(o):
    r = {"reached": False}
    data = o["data"].encode()
    try:
        with socket.create_connection(target(o), timeout=TIMEOUT) as s:
            r["connected"] = True
            s.sendall(data)
            got = b""
            while len(got) < len(data):
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
            r["got"] = got.decode(errors="replace")
            r["reached"] = got == data
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_echo_idle(o):
    """Echo over one connection whose first bytes name the destination (an HTTP head, for the
    proxy's check), then o["idle"] seconds of silence from the sandbox, then more bytes: the
    second echo proves the relay still reads what the sandbox sends after a quiet spell."""
    r = {"reached": False}
    head = f"GET / HTTP/1.1\r\nHost: {o['host']}\r\n\r\n".encode()
    data = o["data"].encode()
    try:
        with socket.create_connection(target(o), timeout=TIMEOUT) as s:
            r["connected"] = True
            for i, chunk in enumerate((head, data)):
                if i:
                    time.sleep(o["idle"])
                s.sendall(chunk)
                got = b""
                while len(got) < len(chunk):
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
                r["echo%d" % i] = got == chunk
            r["reached"] = r["echo0"] and r["echo1"]
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def dns_query(name, qtype=1):
    qid = random.randrange(65536)
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return qid, q + b"\0" + struct.pack("!HH", qtype, 1)


def dns_parse(msg, qid):
    if len(msg) < 12:
        return {"answered": False, "error": "short answer"}
    rid, flags, qd, an = struct.unpack("!HHHH", msg[:8])
    r = {"answered": rid == qid, "rcode": flags & 0xF, "addrs": []}
    i = 12
    for _ in range(qd):
        while msg[i] != 0:
            i += 1 + msg[i]
        i += 5
    for _ in range(an):
        if msg[i] & 0xC0:
            i += 2
        else:
            while msg[i] != 0:
                i += 1 + msg[i]
            i += 1
        rtype, _cls, _ttl, rdlen = struct.unpack("!HHIH", msg[i:i + 10])
        i += 10
        if rtype == 1 and rdlen == 4:
            r["addrs"].append(socket.inet_ntoa(msg[i:i + 4]))
        i += rdlen
    return r


def op_dns(o):
    """A raw query straight to o["server"]:53 (what `dig @server` would send)."""
    r = {"answered": False}
    qid, q = dns_query(o["name"], o.get("qtype", 1))
    port = o.get("port", 53)
    try:
        if o.get("tcp"):
            with socket.create_connection((o["server"], port), timeout=TIMEOUT) as s:
                s.sendall(struct.pack("!H", len(q)) + q)
                hdr = s.recv(2, socket.MSG_WAITALL)
                if len(hdr) < 2:
                    r["error"] = "connection closed without an answer"
                    return r
                (n,) = struct.unpack("!H", hdr)
                msg = s.recv(n, socket.MSG_WAITALL)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(TIMEOUT)
                s.sendto(q, (o["server"], port))
                msg, _ = s.recvfrom(65535)
        r.update(dns_parse(msg, qid))
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_dns_tcp_oversize(o):
    """Over one TCP connection to o["server"]:53, in one write: a query for o["name"], then a
    message of o["size"] bytes (over the filter's 4096); reads until the filter closes."""
    r = {"closed": False}
    _qid, q = dns_query(o["name"])
    junk = bytes(o["size"])
    try:
        with socket.create_connection((o["server"], 53), timeout=TIMEOUT) as s:
            s.sendall(struct.pack("!H", len(q)) + q + struct.pack("!H", len(junk)) + junk)
            while s.recv(65536):
                pass
            r["closed"] = True
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_dns_tcp_hold(o):
    """Opens o["n"] TCP connections to o["server"]:53 and holds them all, then asks for
    o["name"] on each: how many were answered (the rest were closed or never answered)."""
    r = {"answered": 0, "errors": {}}
    socks = []
    try:
        for _ in range(o["n"]):
            try:
                socks.append(socket.create_connection((o["server"], 53), timeout=TIMEOUT))
            except OSError as e:
                r["errors"][type(e).__name__] = r["errors"].get(type(e).__name__, 0) + 1
        time.sleep(0.2)
        for s in socks:
            qid, q = dns_query(o["name"])
            try:
                s.sendall(struct.pack("!H", len(q)) + q)
                hdr = s.recv(2, socket.MSG_WAITALL)
                if len(hdr) == 2 and dns_parse(s.recv(struct.unpack("!H", hdr)[0], socket.MSG_WAITALL), qid)["answered"]:
                    r["answered"] += 1
            except OSError as e:
                r["errors"][type(e).__name__] = r["errors"].get(type(e).__name__, 0) + 1
    finally:
        for s in socks:
            s.close()
    return r


def op_dns_tcp_noread(o):
    """One TCP connection to o["server"]:53: o["n"] queries for o["name"] in one write,
    never reading an answer. "blocked" when the write could not finish within o["wait"]
    seconds, i.e. the filter stopped reading queries whose answers were not being read."""
    r = {"blocked": False}
    _qid, q = dns_query(o["name"])
    blob = (struct.pack("!H", len(q)) + q) * o["n"]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(TIMEOUT)
            s.connect((o["server"], 53))
            s.settimeout(o["wait"])
            t0 = time.monotonic()
            try:
                s.sendall(blob)
                r["sent_s"] = round(time.monotonic() - t0, 3)
            except socket.timeout:
                r["blocked"] = True
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_udp(o):
    r = {"sent": False}
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(o["data"].encode(), (o["connect"], o["port"]))
            r["sent"] = True
    except Exception as e:  # noqa: BLE001
        r["error"] = err(e)
    return r


def op_myaddr(_o):
    """The sandbox's own address toward the default route (a UDP connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("198.51.100.10", 9))
            return {"addr": s.getsockname()[0]}
    except Exception as e:  # noqa: BLE001
        return {"addr": None, "error": err(e)}


def op_v6host(o):
    """Waits for the host end's IPv6 link-local address in o["file"] (the test writes it once
    the sandbox runs), then tries HTTP to it on each of o["ports"] for a few seconds."""
    r = {"reached": False, "tries": {}}
    deadline = time.monotonic() + 10
    addr = None
    while time.monotonic() < deadline:
        try:
            with open(o["file"]) as f:
                addr = f.read().strip() or None
        except OSError:
            pass
        if addr:
            break
        time.sleep(0.1)
    r["addr"] = addr
    if not addr:
        r["error"] = "no address given"
        return r
    for port in o["ports"]:
        end = time.monotonic() + 2
        while True:
            x = op_http({"connect": f"{addr}%eth0", "port": port, "host": "x", "path": o["path"],
                         "timeout": 1.5})
            r["tries"][str(port)] = x
            if x["reached"]:
                r["reached"] = True
                break
            if time.monotonic() > end:
                break
            time.sleep(0.3)
    return r


OPS = {"http": op_http, "https": op_https, "urllib": op_urllib, "resolve": op_resolve,
       "echo": op_echo, "echo_idle": op_echo_idle, "dns": op_dns,
       "dns_tcp_oversize": op_dns_tcp_oversize, "dns_tcp_hold": op_dns_tcp_hold,
       "dns_tcp_noread": op_dns_tcp_noread, "udp": op_udp, "myaddr": op_myaddr, "v6host": op_v6host,
       "http_split": op_http_split, "https_split": op_https_split}


def flood(ip, port, n, hold):
    """Opens @n connections to an echo server as fast as it can, sends a few bytes on each and
    counts the ones that are echoed; holds them all open for @hold seconds, then reports."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 64)), hard))
    except (ValueError, OSError):
        pass
    sel = selectors.DefaultSelector()
    conns, errors = {}, {}
    t0 = time.monotonic()
    for i in range(n):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError as e:
            errors[errno.errorcode.get(e.errno, str(e.errno))] = errors.get(errno.errorcode.get(e.errno, str(e.errno)), 0) + 1
            continue
        s.setblocking(False)
        e = s.connect_ex((ip, port))
        if e not in (0, errno.EINPROGRESS):
            errors[errno.errorcode.get(e, str(e))] = errors.get(errno.errorcode.get(e, str(e)), 0) + 1
            s.close()
            continue
        conns[s] = {"state": "connecting", "tok": b"f%05d\n" % i, "got": b""}
        sel.register(s, selectors.EVENT_WRITE)
    opened = time.monotonic() - t0
    ok = 0
    deadline = time.monotonic() + 8
    pending = len(conns)
    while pending and time.monotonic() < deadline:
        for key, _ev in sel.select(timeout=0.2):
            s = key.fileobj
            c = conns[s]
            try:
                if c["state"] == "connecting":
                    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if e:
                        raise OSError(e, os.strerror(e))
                    s.send(c["tok"])
                    c["state"] = "sent"
                    sel.modify(s, selectors.EVENT_READ)
                else:
                    d = s.recv(64)
                    if not d:
                        raise OSError(errno.ECONNRESET, "closed by peer")
                    c["got"] += d
                    if c["got"] == c["tok"]:
                        c["state"] = "ok"
                        ok += 1
                        pending -= 1
                        sel.unregister(s)
            except OSError as e:
                name = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else str(e)
                errors[name] = errors.get(name, 0) + 1
                c["state"] = "failed"
                pending -= 1
                sel.unregister(s)
    print(json.dumps({"phase": "flooded", "attempted": n, "ok": ok, "errors": errors,
                      "open_s": round(opened, 3),
                      "unanswered": sum(1 for c in conns.values() if c["state"] in ("connecting", "sent"))}),
          flush=True)
    time.sleep(hold)
    # Still alive after holding? (a limit must not have been enforced by killing the good ones)
    alive = 0
    for s, c in conns.items():
        if c["state"] != "ok":
            continue
        try:
            s.setblocking(True)
            s.settimeout(2)
            s.sendall(b"again\n")
            if s.recv(64):
                alive += 1
        except OSError:
            pass
    print(json.dumps({"phase": "done", "ok": ok, "alive_after_hold": alive}), flush=True)


def serve(port, seconds):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"fakenet": True, "server": "sandbox"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("0.0.0.0", port), H)
    srv.timeout = 0.2
    print(json.dumps({"phase": "serving", **op_myaddr({})}), flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        srv.handle_request()


def main():
    if sys.argv[1] == "flood":
        flood(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
        return
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), float(sys.argv[3]))
        return
    out = []
    for o in json.loads(sys.argv[1]):
        t0 = time.monotonic()
        r = OPS[o["op"]](o)
        r["op"], r["s"] = o, round(time.monotonic() - t0, 3)
        out.append(r)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""The fake internet's servers (Python stdlib only), run inside a test network namespace.

    ip netns exec cordtest-net-XXXX /usr/bin/python3 fakenet_servers.py CONFIG.json

CONFIG is a JSON object:
    {"log": "/path/log.jsonl",          every request/query/datagram, one JSON object a line
     "cert": "srv.pem", "key": "srv.key",
     "http":  [["198.51.100.10", 80], ...],     HTTP, answers every path with a JSON body
     "http6": [["::", 80], ...],                the same on IPv6 only
     "https": [["198.51.100.11", 443], ...],    the same over TLS (records the SNI)
     "https11": [["198.51.100.11", 8443], ...], the same with HTTP/1.1 keep-alive, and /bulk/N
     "static": [["198.51.100.12", 80, "/dir"]],  HTTP serving the files of /dir (a mirror)
     "https_idle": [["198.51.100.11", 8444]], HTTPS that closes a connection idle for 1 s
     "echo":  [["198.51.100.10", 22], ...],     raw TCP echo (single thread, many connections)
     "udp":   [["198.51.100.10", 7], ...],      UDP sink: logs every datagram, answers nothing
     "dns":   [["198.51.100.53", 53], ...],     UDP+TCP DNS: A records from "zone", else NXDOMAIN
     "zone":  {"api.example.test": ["198.51.100.11"], ...}}

Prints "READY" on stdout once every socket listens, then serves until killed. The servers
only ever answer; they never open a connection of their own.
"""

import http.server
import json
import selectors
import socket
import socketserver
import ssl
import struct
import sys
import threading

LOG_LOCK = threading.Lock()
LOG = None


def log(rec):
    line = json.dumps(rec, sort_keys=True) + "\n"
    with LOG_LOCK:
        LOG.write(line)
        LOG.flush()


# ---- HTTP and HTTPS ----

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def _answer(self):
        srv = self.server
        sni = getattr(self.connection, "fakenet_sni", None)
        rec = {"kind": "https" if srv.tls else "http", "server": f"{srv.addr}:{srv.port}",
               "peer": self.client_address[0], "host": self.headers.get("Host"), "sni": sni,
               "path": self.path, "method": self.command}
        # What a credential would travel in: logged (the far side's testimony), never echoed,
        # so that a sandbox cannot learn a secret from the answer.
        n = int(self.headers.get("Content-Length") or 0)
        req_body = self.rfile.read(min(n, 1 << 20)).decode(errors="replace") if n else ""
        secret = {"authorization": self.headers.get("Authorization"),
                  "x_api_key": self.headers.get("X-Api-Key"), "query": self.path.partition("?")[2],
                  "body": req_body[:4096]}
        log(dict(rec, **secret))
        rec["path"] = self.path.partition("?")[0]
        body = json.dumps(dict(rec, fakenet=True)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Fakenet", "1")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_HEAD = _answer


class KeepAliveHandler(Handler):
    """HTTP/1.1 with keep-alive (the benchmark's requests after the first handshake), and
    /bulk/N: N bytes of body, for throughput."""
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    wbufsize = 1 << 16  # head and body in one write (flushed after each request)

    def _answer(self):
        if self.path.startswith("/bulk/"):
            n = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = bytes(1 << 16)
            while n > 0:
                self.wfile.write(chunk[:min(n, len(chunk))])
                n -= len(chunk)
            return
        super()._answer()

    do_GET = do_POST = do_HEAD = _answer


class StaticHandler(http.server.SimpleHTTPRequestHandler):
    """The files of the server's directory, as a package mirror serves them (each request
    logged like any other)."""
    protocol_version = "HTTP/1.0"

    def __init__(self, *a, **kw):
        super().__init__(*a, directory=self.server_dir, **kw)

    def log_message(self, *a):
        pass

    def send_head(self):
        srv = self.server
        log({"kind": "static", "server": f"{srv.addr}:{srv.port}", "peer": self.client_address[0],
             "host": self.headers.get("Host"), "path": self.path, "method": self.command})
        return super().send_head()


def static_handler(directory):
    return type("StaticDir", (StaticHandler,), {"server_dir": directory})


class IdleCloseHandler(Handler):
    """Closes a connection that sends no request within a second, as real servers do (an
    approval that takes longer than that finds its upstream connection gone)."""
    timeout = 1


class HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, addr, port, tls_ctx=None, handler=None):
        self.addr, self.port, self.tls, self.tls_ctx = addr, port, tls_ctx is not None, tls_ctx
        super().__init__((addr, port), handler or Handler)

    def get_request(self):
        sock, peer = self.socket.accept()
        if self.tls_ctx is not None:
            # The handshake happens in the handler's thread, on the first read.
            sock = self.tls_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, peer

    def handle_error(self, request, client_address):
        pass  # a client that hangs up, a failed handshake: not our business


class HTTP6Server(HTTPServer):
    address_family = socket.AF_INET6

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


def tls_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def on_sni(sock, name, _ctx):
        sock.fakenet_sni = name

    ctx.sni_callback = on_sni
    return ctx


# ---- TCP echo and UDP sink (one selector thread for all of them) ----

def echo_and_udp_loop(listeners, udps):
    sel = selectors.DefaultSelector()
    for ls in listeners:
        sel.register(ls, selectors.EVENT_READ, ("listen", ls.getsockname()))
    for us in udps:
        sel.register(us, selectors.EVENT_READ, ("udp", us.getsockname()))
    first = {}
    while True:
        for key, _ in sel.select():
            kind, local = key.data
            s = key.fileobj
            try:
                if kind == "listen":
                    c, _peer = s.accept()
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ, ("conn", local))
                elif kind == "udp":
                    data, peer = s.recvfrom(65535)
                    log({"kind": "udp", "server": f"{local[0]}:{local[1]}", "peer": peer[0],
                         "data": data[:200].decode(errors="replace")})
                else:
                    data = s.recv(65536)
                    if not data:
                        sel.unregister(s)
                        first.pop(s, None)
                        s.close()
                        continue
                    if s not in first:
                        first[s] = True
                        log({"kind": "echo", "server": f"{local[0]}:{local[1]}",
                             "peer": s.getpeername()[0], "data": data[:200].decode(errors="replace")})
                    s.sendall(data)  # small payloads only: never blocks for long
            except OSError:
                if kind == "conn":
                    try:
                        sel.unregister(s)
                    except (KeyError, ValueError):
                        pass
                    first.pop(s, None)
                    s.close()


# ---- DNS ----

def parse_question(msg):
    """(id, flags, qname, qtype, end of question) or None."""
    if len(msg) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", msg[:6])
    if qd != 1:
        return None
    i, labels = 12, []
    while True:
        if i >= len(msg):
            return None
        n = msg[i]
        i += 1
        if n == 0:
            break
        if n & 0xC0 or i + n > len(msg):
            return None
        labels.append(msg[i:i + n].decode("ascii", "replace"))
        i += n
    if i + 4 > len(msg):
        return None
    qtype, _qclass = struct.unpack("!HH", msg[i:i + 4])
    return qid, flags, ".".join(labels).lower(), qtype, i + 4


def dns_answer(msg, zone, proto, peer, local):
    q = parse_question(msg)
    if q is None:
        log({"kind": "dns", "proto": proto, "peer": peer, "server": local, "qname": None,
             "malformed": True})
        return None
    qid, flags, qname, qtype, qend = q
    addrs = zone.get(qname.rstrip("."))
    answers = b""
    if addrs is None:
        rcode = 3  # NXDOMAIN
    else:
        rcode = 0
        if qtype == 1:  # A; anything else: NOERROR without answers (NODATA)
            for a in addrs:
                answers += struct.pack("!HHHIH", 0xC00C, 1, 1, 30, 4) + socket.inet_aton(a)
    n = len(answers) // 16
    log({"kind": "dns", "proto": proto, "peer": peer, "server": local, "qname": qname,
         "qtype": qtype, "rcode": rcode, "answers": addrs if (addrs and qtype == 1) else []})
    rd = flags & 0x0100
    hdr = struct.pack("!HHHHHH", qid, 0x8000 | 0x0400 | rd | 0x0080 | rcode, 1, n, 0, 0)
    return hdr + msg[12:qend] + answers


def dns_udp(sock, zone):
    local = "%s:%d" % sock.getsockname()
    while True:
        try:
            msg, peer = sock.recvfrom(65535)
            out = dns_answer(msg, zone, "udp", peer[0], local)
            if out:
                sock.sendto(out, peer)
        except OSError:
            pass


def dns_tcp(lsock, zone):
    local = "%s:%d" % lsock.getsockname()

    def serve(c, peer):
        with c:
            c.settimeout(10)
            try:
                while True:
                    hdr = c.recv(2, socket.MSG_WAITALL)
                    if len(hdr) < 2:
                        return
                    (n,) = struct.unpack("!H", hdr)
                    msg = c.recv(n, socket.MSG_WAITALL)
                    out = dns_answer(msg, zone, "tcp", peer[0], local)
                    if not out:
                        return
                    c.sendall(struct.pack("!H", len(out)) + out)
            except OSError:
                return

    while True:
        try:
            c, peer = lsock.accept()
        except OSError:
            continue
        threading.Thread(target=serve, args=(c, peer), daemon=True).start()


def main():
    global LOG
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    LOG = open(cfg["log"], "a")
    zone = {k.lower(): v for k, v in cfg.get("zone", {}).items()}
    threads = []

    for addr, port in cfg.get("http", []):
        s = HTTPServer(addr, port)
        threads.append(threading.Thread(target=s.serve_forever, daemon=True))
    for addr, port in cfg.get("http6", []):
        s = HTTP6Server(addr, port)
        threads.append(threading.Thread(target=s.serve_forever, daemon=True))
    if cfg.get("https"):
        ctx = tls_context(cfg["cert"], cfg["key"])
        for addr, port in cfg["https"]:
            s = HTTPServer(addr, port, ctx)
            threads.append(threading.Thread(target=s.serve_forever, daemon=True))
    for addr, port, directory in cfg.get("static", []):
        s = HTTPServer(addr, port, handler=static_handler(directory))
        threads.append(threading.Thread(target=s.serve_forever, daemon=True))
    for addr, port in cfg.get("https_idle", []):
        s = HTTPServer(addr, port, tls_context(cfg["cert"], cfg["key"]), IdleCloseHandler)
        threads.append(threading.Thread(target=s.serve_forever, daemon=True))
    for addr, port in cfg.get("https11", []):
        s = HTTPServer(addr, port, tls_context(cfg["cert"], cfg["key"]), KeepAliveHandler)
        threads.append(threading.Thread(target=s.serve_forever, daemon=True))

    listeners, udps = [], []
    for addr, port in cfg.get("echo", []):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(2048)
        ls.setblocking(False)
        listeners.append(ls)
    for addr, port in cfg.get("udp", []):
        us = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        us.bind((addr, port))
        udps.append(us)
    if listeners or udps:
        threads.append(threading.Thread(target=echo_and_udp_loop, args=(listeners, udps), daemon=True))

    for addr, port in cfg.get("dns", []):
        us = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        us.bind((addr, port))
        ts = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ts.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ts.bind((addr, port))
        ts.listen(128)
        threads.append(threading.Thread(target=dns_udp, args=(us, zone), daemon=True))
        threads.append(threading.Thread(target=dns_tcp, args=(ts, zone), daemon=True))

    for t in threads:
        t.start()
    print("READY", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()

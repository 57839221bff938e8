"""A small in-process stand-in for cordond (a subset of docs/api/openapi.yaml) so that the
SDK's transport, streaming and error handling are tested without root or a built daemon.
Processes run on the host, unsandboxed: test use only."""

import base64
import itertools
import json
import os
import queue
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

SIGNALS = {n: int(getattr(signal, "SIG" + n)) for n in
           "HUP INT QUIT ABRT KILL USR1 USR2 PIPE ALRM TERM CONT STOP TSTP TTIN TTOU WINCH".split()}


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ApiError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeProc:
    def __init__(self, argv, cwd, env, tag):
        self.argv, self.tag, self.cwd = argv, tag, cwd
        self.popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True)
        self.pid = self.popen.pid
        self.started_at = now()
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.initial = queue.Queue()  # the starting request's stream: nothing is missed
        self.subscribers = [self.initial]
        self.exit_event = None
        self.stdin_closed = False
        self.readers = [threading.Thread(target=self._read, args=(f, k), daemon=True)
                        for f, k in ((self.popen.stdout, "stdout"), (self.popen.stderr, "stderr"))]
        for t in self.readers:
            t.start()
        threading.Thread(target=self._wait, daemon=True).start()

    def subscribe(self):
        q = queue.Queue()
        with self.lock:
            if self.exit_event is not None:
                q.put(self.exit_event)
            else:
                self.subscribers.append(q)
        return q

    def _publish(self, ev):
        with self.lock:
            for q in self.subscribers:
                q.put(ev)

    def _read(self, f, kind):
        while True:
            data = os.read(f.fileno(), 4096)
            if not data:
                return
            self._publish({"type": kind, "pid": self.pid,
                           "data": base64.b64encode(data).decode()})

    def _wait(self):
        rc = self.popen.wait()
        for t in self.readers:
            t.join()
        ev = {"type": "exit", "pid": self.pid, "exit_code": rc if rc >= 0 else -1,
              "signal": -rc if rc < 0 else 0, "timed_out": False, "oom": False,
              "duration_ms": int((time.monotonic() - self.t0) * 1000)}
        with self.lock:
            self.exit_event = ev
            for q in self.subscribers:
                q.put(ev)
            self.subscribers = []


class FakeSandbox:
    def __init__(self, sid, body):
        self.id = sid
        self.root = tempfile.mkdtemp(prefix="fake-sbx-")
        self.env = dict(body.get("env") or {})
        self.procs = {}
        self.audit = []
        self.info = {
            "id": sid, "template": body.get("template") or "host", "runtime": "jail",
            "state": "ready", "created_at": now(), "expires_at": now(),
            "timeout_s": body.get("timeout_s") or 300,
            "limits": {"cpus": 1, "memory_mb": 512, "pids": 256, "disk_mb": 4096,
                       **(body.get("limits") or {})},
            "network": body.get("network") or {"policy": "deny"},
            "metadata": dict(body.get("metadata") or {}),
        }

    def host_path(self, p):
        if not isinstance(p, str) or not p.startswith("/") or "\0" in p:
            raise ApiError(400, "invalid_field", "path: must be absolute")
        return os.path.join(self.root, os.path.normpath(p).lstrip("/"))

    def entry(self, p):
        hp = self.host_path(p)
        try:
            st = os.lstat(hp)
        except FileNotFoundError:
            raise ApiError(404, "not_found", f"{p}: no such file or directory")
        import stat as S
        t = ("dir" if S.S_ISDIR(st.st_mode) else "file" if S.S_ISREG(st.st_mode)
             else "symlink" if S.S_ISLNK(st.st_mode) else "other")
        e = {"name": os.path.basename(p.rstrip("/")) or "/", "path": p, "type": t,
             "size": st.st_size, "mode": S.S_IMODE(st.st_mode),
             "mtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime))}
        if t == "symlink":
            e["symlink_target"] = os.readlink(hp)
        return e


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-cordond"

    def log_message(self, *a):
        pass

    def address_string(self):
        return "unix"

    # -- plumbing --
    def send_json(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_empty(self, status=204):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def body_bytes(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > self.server.fake.upload_limit:
            raise ApiError(413, "payload_too_large", "body too large")
        return self.rfile.read(n) if n else b""

    def body_json(self):
        raw = self.body_bytes()
        if len(raw) > 1048576:
            raise ApiError(413, "payload_too_large", "body over 1 MiB")
        if not raw:
            return {}
        try:
            doc = json.loads(raw)
        except ValueError:
            raise ApiError(400, "bad_request", "body is not JSON")
        if not isinstance(doc, dict):
            raise ApiError(400, "bad_request", "body is not an object")
        return {k: v for k, v in doc.items() if v is not None}

    def stream_start(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, ev):
        data = (json.dumps(ev) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def stream_end(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        fake = self.server.fake
        fake.requests.append((method, self.path, dict(self.headers)))
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
        try:
            if (u.path != "/healthz" and fake.keys is not None
                    and not isinstance(self.server, socketserver.UnixStreamServer)):
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Bearer ") or auth[7:] not in fake.keys:
                    raise ApiError(401, "unauthorized", "missing or unknown API key")
            for pat, meth, fn in ROUTES:
                m = re.fullmatch(pat, u.path)
                if m and meth == method:
                    return fn(self, fake, q, *m.groups())
            raise ApiError(404, "not_found", f"no route {method} {u.path}")
        except ApiError as e:
            self.send_json(e.status, {"error": {"code": e.code, "message": e.message}})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class FakeCordond:
    """Serve the fake API on a unix socket (and TCP with keys when ``keys`` is given)."""

    def __init__(self, socket_path, keys=None, tcp=False, upload_limit=64 << 20):
        self.socket_path = socket_path
        self.keys = keys
        self.upload_limit = upload_limit
        self.sandboxes = {}
        self.requests = []
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        servers = []

        class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True
        s = UnixServer(socket_path, Handler)
        s.fake = self
        servers.append(s)
        self.url = None
        if tcp:
            class TCPServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
                daemon_threads = True
                allow_reuse_address = True
            t = TCPServer(("127.0.0.1", 0), Handler)
            t.fake = self
            servers.append(t)
            self.url = f"http://127.0.0.1:{t.server_address[1]}"
        self.servers = servers
        for srv in servers:
            threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True).start()

    def get(self, sid):
        s = self.sandboxes.get(sid)
        if s is None:
            raise ApiError(404, "not_found", f"sandbox {sid}: not found")
        return s

    def stop(self):
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()
        for s in list(self.sandboxes.values()):
            destroy(s)
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass


def destroy(s):
    for p in s.procs.values():
        if p.popen.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    shutil.rmtree(s.root, ignore_errors=True)


# -- routes ---------------------------------------------------------------------------------------

def healthz(h, fake, q):
    h.send_json(200, {"status": "ok"})


def create(h, fake, q):
    body = h.body_json()
    known = ["template", "runtime", "timeout_s", "limits", "network", "env", "metadata"]
    for k in body:
        if k not in known:
            raise ApiError(400, "unknown_field", f"{k}: unknown field (known: {', '.join(known)})")
    lim = body.get("limits") or {}
    for k in lim:
        if k not in ("cpus", "memory_mb", "pids", "disk_mb"):
            raise ApiError(400, "unknown_field",
                           f"limits.{k}: unknown field (known: cpus, memory_mb, pids, disk_mb)")
    m = lim.get("memory_mb")
    if m is not None and (type(m) is not int or not 16 <= m <= 65536):
        raise ApiError(400, "invalid_field", "limits.memory_mb: must be an integer between 16 and 65536")
    if body.get("template", "host") != "host":
        raise ApiError(404, "not_found", f"template {body['template']}: not found")
    sid = "sb%04d" % next(fake.ids)
    s = FakeSandbox(sid, body)
    s.audit.append({"ts": now(), "event": "sandbox.create", "sandbox": sid})
    fake.sandboxes[sid] = s
    h.send_json(201, s.info)


def list_sandboxes(h, fake, q):
    filters = {}
    for k, v in q:
        if not k.startswith("metadata."):
            raise ApiError(400, "unknown_field", f"{k}: unknown parameter")
        filters[k[9:]] = v
    out = [s.info for s in fake.sandboxes.values()
           if all(s.info["metadata"].get(k) == v for k, v in filters.items())]
    h.send_json(200, {"sandboxes": out})


def get_sandbox(h, fake, q, sid):
    h.send_json(200, fake.get(sid).info)


def delete_sandbox(h, fake, q, sid):
    s = fake.get(sid)
    del fake.sandboxes[sid]
    destroy(s)
    h.send_empty()


def set_timeout(h, fake, q, sid):
    s = fake.get(sid)
    t = h.body_json().get("timeout_s")
    if type(t) is not int or t < 1:
        raise ApiError(400, "invalid_field", "timeout_s: must be an integer >= 1")
    s.info["timeout_s"] = t
    h.send_json(200, s.info)


def _argv(body):
    if ("argv" in body) == ("cmd" in body):
        raise ApiError(400, "invalid_field", "argv: exactly one of argv and cmd")
    return body["argv"] if "argv" in body else ["/bin/sh", "-c", body["cmd"]]


def _env(s, body):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": s.root}
    env.update(s.env)
    env.update(body.get("env") or {})
    return env


def exec_(h, fake, q, sid):
    s = fake.get(sid)
    body = h.body_json()
    argv = _argv(body)
    if body.get("user", "user") not in ("user", "root"):
        raise ApiError(400, "invalid_field", "user: must be one of user, root")
    t0 = time.monotonic()
    timed_out = False
    try:
        p = subprocess.run(argv, input=body.get("stdin", "").encode(), capture_output=True,
                           env=_env(s, body), cwd=s.root, timeout=body.get("timeout_s", 60))
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err, timed_out = -9, e.stdout or b"", e.stderr or b"", True
    except FileNotFoundError:
        rc, out, err = 127, b"", b"not found\n"
    s.audit.append({"ts": now(), "event": "process.start", "argv": argv})
    h.send_json(200, {"exit_code": rc if rc >= 0 else -1, "signal": -rc if rc < 0 else 0,
                      "stdout": out.decode("utf-8", "replace"),
                      "stderr": err.decode("utf-8", "replace"), "timed_out": timed_out,
                      "oom": False, "duration_ms": int((time.monotonic() - t0) * 1000)})


def _follow(h, p, start=True, qu=None):
    qu = qu or p.subscribe()
    h.stream_start()
    if start and p.exit_event is None:
        ev = {"type": "start", "pid": p.pid}
        if p.tag:
            ev["tag"] = p.tag
        h.chunk(ev)
    while True:
        ev = qu.get()
        h.chunk(ev)
        if ev["type"] == "exit":
            break
    h.stream_end()


def start_process(h, fake, q, sid):
    s = fake.get(sid)
    body = h.body_json()
    argv = _argv(body)
    try:
        p = FakeProc(argv, s.root, _env(s, body), body.get("tag"))
    except FileNotFoundError:
        raise ApiError(400, "invalid_field", "argv: not found")  # the real daemon differs
    s.procs[p.pid] = p
    _follow(h, p, qu=p.initial)


def list_processes(h, fake, q, sid):
    s = fake.get(sid)
    out = []
    for p in s.procs.values():
        if p.exit_event is None:
            d = {"pid": p.pid, "argv": p.argv, "cwd": "/home/user", "user": "user",
                 "started_at": p.started_at}
            if p.tag:
                d["tag"] = p.tag
            out.append(d)
    h.send_json(200, {"processes": out})


def _proc(fake, sid, pid):
    p = fake.get(sid).procs.get(int(pid))
    if p is None:
        raise ApiError(404, "not_found", f"process {pid}: not found")
    return p


def stdin(h, fake, q, sid, pid):
    p = _proc(fake, sid, pid)
    body = h.body_json()
    if p.stdin_closed or p.exit_event is not None:
        raise ApiError(409, "conflict", "stdin is closed")
    if "data" in body:
        try:
            p.popen.stdin.write(base64.b64decode(body["data"], validate=True))
            p.popen.stdin.flush()
        except BrokenPipeError:
            pass
    if body.get("eof"):
        p.stdin_closed = True
        p.popen.stdin.close()
    h.send_empty()


def signal_(h, fake, q, sid, pid):
    p = _proc(fake, sid, pid)
    sig = h.body_json().get("signal")
    if isinstance(sig, str):
        num = SIGNALS.get(sig[3:] if sig.startswith("SIG") else sig)
    else:
        num = sig if sig in SIGNALS.values() else None
    if num is None:
        raise ApiError(400, "invalid_field", "signal: not an allowed signal")
    if p.exit_event is None:
        try:
            os.killpg(p.pid, num)
        except ProcessLookupError:
            pass
    h.send_empty()


def events(h, fake, q, sid, pid):
    _follow(h, _proc(fake, sid, pid))


def _qpath(q):
    d = dict(q)
    if "path" not in d:
        raise ApiError(400, "invalid_field", "path: required")
    return d["path"]


def files(h, fake, q, sid):
    s = fake.get(sid)
    path = _qpath(q)
    hp = s.host_path(path)
    if h.command == "PUT":
        data = h.body_bytes()
        if not os.path.isdir(os.path.dirname(hp)):
            raise ApiError(404, "not_found", f"{path}: parent directory does not exist")
        with open(hp, "wb") as f:
            f.write(data)
        s.audit.append({"ts": now(), "event": "file.write", "path": path})
        return h.send_json(200, s.entry(path))
    if h.command == "DELETE":
        s.entry(path)
        if os.path.isdir(hp) and not os.path.islink(hp):
            shutil.rmtree(hp)
        else:
            os.unlink(hp)
        return h.send_empty()
    s.entry(path)
    if os.path.isdir(hp):
        raise ApiError(409, "conflict", f"{path}: is a directory")
    with open(hp, "rb") as f:
        data = f.read()
    h.send_response(200)
    h.send_header("Content-Type", "application/octet-stream")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def files_list(h, fake, q, sid):
    s = fake.get(sid)
    path = _qpath(q)
    depth = int(dict(q).get("depth", 1))
    if s.entry(path)["type"] != "dir":
        raise ApiError(409, "conflict", f"{path}: not a directory")
    out = []

    def walk(p, d):
        for name in sorted(os.listdir(s.host_path(p))):
            cp = p.rstrip("/") + "/" + name
            e = s.entry(cp)
            out.append(e)
            if e["type"] == "dir" and d > 1:
                walk(cp, d - 1)
    walk(path, depth)
    h.send_json(200, {"entries": out})


def files_stat(h, fake, q, sid):
    h.send_json(200, fake.get(sid).entry(_qpath(q)))


def files_mkdir(h, fake, q, sid):
    s = fake.get(sid)
    body = h.body_json()
    hp = s.host_path(body.get("path"))
    try:
        if body.get("parents"):
            os.makedirs(hp, exist_ok=True)
        else:
            os.mkdir(hp)
    except FileExistsError:
        raise ApiError(409, "conflict", "path exists")
    except FileNotFoundError:
        raise ApiError(404, "not_found", "parent does not exist")
    h.send_json(200, s.entry(body["path"]))


def files_move(h, fake, q, sid):
    s = fake.get(sid)
    body = h.body_json()
    s.entry(body.get("from"))
    os.rename(s.host_path(body["from"]), s.host_path(body["to"]))
    h.send_empty()


def audit(h, fake, q, sid):
    s = fake.get(sid)
    data = "".join(json.dumps(e) + "\n" for e in s.audit).encode()
    h.send_response(200)
    h.send_header("Content-Type", "application/x-ndjson")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


SB = r"/v1/sandboxes/([A-Za-z0-9_-]{1,64})"
ROUTES = [
    (r"/healthz", "GET", healthz),
    (r"/v1/sandboxes", "POST", create),
    (r"/v1/sandboxes", "GET", list_sandboxes),
    (SB, "GET", get_sandbox),
    (SB, "DELETE", delete_sandbox),
    (SB + "/timeout", "POST", set_timeout),
    (SB + "/exec", "POST", exec_),
    (SB + "/processes", "POST", start_process),
    (SB + "/processes", "GET", list_processes),
    (SB + r"/processes/(\d+)/stdin", "POST", stdin),
    (SB + r"/processes/(\d+)/signal", "POST", signal_),
    (SB + r"/processes/(\d+)/events", "GET", events),
    (SB + "/files", "GET", files),
    (SB + "/files", "PUT", files),
    (SB + "/files", "DELETE", files),
    (SB + "/files/list", "GET", files_list),
    (SB + "/files/stat", "GET", files_stat),
    (SB + "/files/mkdir", "POST", files_mkdir),
    (SB + "/files/move", "POST", files_move),
    (SB + "/audit", "GET", audit),
]

"""The :class:`Sandbox` class: create, connect, list, exec, files, processes, audit."""

from __future__ import annotations

import json
import socket
import logging
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import code as _code
from . import errors
from ._http import DEFAULT_REQUEST_TIMEOUT, Client, quote_segment
from .files import Files
from .models import ExecResult, SandboxInfo
from .pty import Pty
from .processes import Processes, command_fields
from .snapshots import Snapshot

log = logging.getLogger("cordon")

_EXEC_MARGIN = 30.0      # seconds the HTTP wait exceeds the command's own timeout
_DEFAULT_EXEC_TIMEOUT = 60


def _volume_mount(v: Any) -> Dict[str, Any]:
    """``"name:/path[:ro]"`` or a mapping, as the API's ``{"name", "path", "read_only"}``."""
    if isinstance(v, str):
        name, sep, rest = v.partition(":")
        path, ro = (rest[:-3], True) if rest.endswith(":ro") else (rest, False)
        if not sep or not name or not path:
            raise ValueError(f"volume {v!r}: expected NAME:PATH or NAME:PATH:ro")
        return {"name": name, "path": path, "read_only": ro}
    return dict(v)


def _client(client: Optional[Client], socket: Optional[str], url: Optional[str],
            api_key: Optional[str], request_timeout: Optional[float]) -> Client:
    if client is not None:
        if socket or url or api_key:
            raise ValueError("give either client= or socket=/url=/api_key=, not both")
        return client
    return Client(socket=socket, url=url, api_key=api_key, request_timeout=request_timeout)


class Sandbox:
    """A sandbox in cordond. Make one with :meth:`create` or :meth:`connect`.

    Used as a context manager it is destroyed when the block ends.
    """

    def __init__(self, sandbox_id: str, client: Client, info: Optional[SandboxInfo] = None):
        self.id = sandbox_id
        self._client = client
        self._info = info
        self.files = Files(self)
        self.processes = Processes(self)
        self.pty = Pty(self)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def create(cls, template: Optional[str] = None, timeout: Optional[int] = None, *,
               runtime: Optional[str] = None, limits: Optional[Mapping[str, Any]] = None,
               network: Union[str, Mapping[str, Any], None] = None,
               env: Optional[Mapping[str, str]] = None,
               metadata: Optional[Mapping[str, str]] = None,
               snapshot: Union[str, Snapshot, None] = None,
               secrets: Optional[Mapping[str, Mapping[str, Any]]] = None,
               volumes: Optional[Sequence[Any]] = None,
               on_approval: Optional[Callable[[Any], Optional[bool]]] = None,
               socket: Optional[str] = None, url: Optional[str] = None,
               api_key: Optional[str] = None, client: Optional[Client] = None,
               request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT) -> "Sandbox":
        """Create a sandbox (claimed from the warm pool when one is ready).

        Args:
            template: the image (server default ``host``).
            timeout: seconds until it is destroyed (server default 300, capped by the server).
            runtime: ``"jail"``, ``"gvisor"`` (where the server has runsc), ``"microvm"``
                (where it has QEMU and the guest kernel; no network yet) or ``"auto"`` (the
                strongest the server can run with a network); one it cannot run raises
                :class:`UnsupportedRuntime` with the reason. The one used is
                ``info().runtime``.
            limits: ``{"cpus": 0.5, "memory_mb": 1024, "pids": 256, "disk_mb": 1024}``.
            network: a policy name (``"deny"``, ``"allow"``, ``"public"``) or
                ``{"policy": "allow", "allow": ["*.github.com:443"]}``.
            env: environment variables of every process in it.
            metadata: free-form labels, to find it with :meth:`list`.
            snapshot: start from a :class:`Snapshot` (or its id): its files, and its
                template, runtime and limits unless given here.
            secrets: ``{"OPENAI_API_KEY": {"value": "sk-...", "hosts": ["api.openai.com"],
                "in": ["header"]}}``: the sandbox's ``OPENAI_API_KEY`` holds a placeholder,
                and the egress proxy puts the real value into requests to those hosts only
                (over TLS it terminates with a CA the sandbox trusts). Without ``network`` the
                sandbox may reach each host on port 443. The value never enters the sandbox.
            volumes: persistent volumes (:class:`cordon.Volumes`) to mount, each
                ``{"name": "data", "path": "/data", "read_only": False}`` or the string
                ``"data:/data"`` (``"data:/data:ro"``); one mounted read-write elsewhere
                raises :class:`VolumeInUse`.
            on_approval: ``callback(approval)``, called on a thread of the SDK's for each
                request of this sandbox that an approve rule of its network (``{"approve":
                "api.stripe.com", "methods": ["POST"], "paths": ["/v1/charges"]}``) holds;
                True allows it, False denies it, None leaves it pending (see
                :class:`cordon.Approvals`). The watcher ends with the sandbox.
            socket, url, api_key: where cordond is (default: ``$CORDON_URL`` +
                ``$CORDON_API_KEY``, ``$CORDON_SOCKET``, ``/run/cordon/cordon.sock``).
            client: an existing :class:`cordon.Client` to share.
        """
        c = _client(client, socket, url, api_key, request_timeout)
        body: Dict[str, Any] = {}
        if isinstance(network, str):
            network = {"policy": network}
        for k, v in (("template", template), ("runtime", runtime), ("timeout_s", timeout),
                     ("limits", dict(limits) if limits is not None else None),
                     ("network", dict(network) if network is not None else None),
                     ("env", dict(env) if env is not None else None),
                     ("metadata", dict(metadata) if metadata is not None else None),
                     ("snapshot", snapshot.id if isinstance(snapshot, Snapshot) else snapshot),
                     ("secrets", {k: dict(v) for k, v in secrets.items()} if secrets is not None else None),
                     ("volumes", [_volume_mount(v) for v in volumes] if volumes is not None else None)):
            if v is not None:
                body[k] = v
        info = SandboxInfo.from_json(c.request("POST", "/v1/sandboxes", json_body=body).json())
        sbx = cls(info.id, c, info)
        if on_approval is not None:
            from .approvals import ApprovalWatcher
            sbx._watcher = ApprovalWatcher(c, info.id, on_approval)
            sbx._watcher.start()
            sbx._watcher.ready.wait(10)
        return sbx

    @classmethod
    def connect(cls, sandbox_id: str, *, socket: Optional[str] = None,
                url: Optional[str] = None, api_key: Optional[str] = None,
                client: Optional[Client] = None,
                request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT) -> "Sandbox":
        """Attach to an existing sandbox by id; raises :class:`NotFound` if there is none."""
        c = _client(client, socket, url, api_key, request_timeout)
        sbx = cls(sandbox_id, c)
        sbx.info()
        return sbx

    @classmethod
    def list(cls, metadata: Optional[Mapping[str, str]] = None, *,
             socket: Optional[str] = None, url: Optional[str] = None,
             api_key: Optional[str] = None, client: Optional[Client] = None,
             request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT) -> List[SandboxInfo]:
        """The sandboxes (in creation order) whose metadata has every given key and value."""
        c = _client(client, socket, url, api_key, request_timeout)
        query = [(f"metadata.{k}", v) for k, v in (metadata or {}).items()]
        doc = c.request("GET", "/v1/sandboxes", query=query).json() or {}
        return [SandboxInfo.from_json(s) for s in doc.get("sandboxes", [])]

    # -- helpers -----------------------------------------------------------------------------

    def _path(self, *parts: Any) -> str:
        p = "/v1/sandboxes/" + quote_segment(self.id)
        for part in parts:
            p += "/" + quote_segment(part)
        return p

    def __repr__(self) -> str:
        return f"<cordon.Sandbox {self.id} via {self._client.endpoint.describe()}>"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.kill()
        except errors.CordonError:
            if exc_type is None:
                raise
            log.warning("cordon: could not destroy sandbox %s", self.id, exc_info=True)

    @property
    def sandbox_id(self) -> str:
        return self.id

    @property
    def client(self) -> Client:
        return self._client

    # -- lifecycle ---------------------------------------------------------------------------

    def info(self) -> SandboxInfo:
        """The sandbox's current state, limits, deadline and metadata."""
        self._info = SandboxInfo.from_json(self._client.request("GET", self._path()).json())
        return self._info

    def is_running(self) -> bool:
        """False once the sandbox is gone (killed, or past its deadline)."""
        try:
            return self.info().state not in ("stopped", "destroyed")
        except errors.NotFound:
            return False

    def set_timeout(self, timeout: int) -> SandboxInfo:
        """Move the deadline to now + ``timeout`` seconds (capped by the server's maximum)."""
        self._info = SandboxInfo.from_json(self._client.request(
            "POST", self._path("timeout"), json_body={"timeout_s": timeout}).json())
        return self._info

    def kill(self) -> bool:
        """Destroy the sandbox and everything in it. False if it was already gone."""
        if getattr(self, "_watcher", None) is not None:
            self._watcher.stop()
        try:
            self._client.request("DELETE", self._path())
            return True
        except errors.NotFound:
            return False

    # -- pause, snapshots, fork --------------------------------------------------------------

    def pause(self) -> SandboxInfo:
        """Freeze every process (state ``paused``); the TTL stops, exec and files raise
        :class:`cordon.SandboxPaused` until :meth:`resume`."""
        self._info = SandboxInfo.from_json(self._client.request("POST", self._path("pause")).json())
        return self._info

    def resume(self) -> SandboxInfo:
        """Let a paused sandbox run again; its TTL counts on from where it stopped."""
        self._info = SandboxInfo.from_json(self._client.request("POST", self._path("resume")).json())
        return self._info

    def snapshot(self) -> Snapshot:
        """A snapshot of the sandbox's filesystem (``memory`` False on the jail), for
        :meth:`create` ``(snapshot=...)``. Raises :class:`cordon.SnapshotLimit` past the
        server's total size cap."""
        return Snapshot.from_json(self._client.request("POST", self._path("snapshots")).json())

    def fork(self, n: int = 1, timeout: Optional[int] = None) -> List[Any]:
        """One snapshot, ``n`` (1..100) children started from it: a list with a
        :class:`Sandbox` per child made, or the :class:`cordon.CordonError` of one that was
        not, in order. Children are independent: destroying the parent leaves them."""
        body: Dict[str, Any] = {"count": n}
        if timeout is not None:
            body["timeout_s"] = timeout
        out: List[Any] = []
        for entry in self._client.request("POST", self._path("fork"), json_body=body).json():
            if "id" in entry:
                out.append(Sandbox(entry["id"], self._client))
            else:
                e = entry.get("error", {})
                out.append(errors.error_from_response(0, json.dumps({"error": e}).encode()))
        return out

    def set_network(self, policy: str, allow: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """Replace the network policy (``deny``/``allow``/``public``); returns the one in force."""
        body: Dict[str, Any] = {"policy": policy}
        if allow is not None:
            body["allow"] = list(allow)
        return self._client.request("PUT", self._path("network"), json_body=body).json()

    def set_secret(self, name: str, value: str, hosts: Optional[Sequence[str]] = None,
                   where: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """Rotate secret ``name`` (one the sandbox was created with): a new ``value`` under
        the same placeholder, and new ``hosts`` or ``where`` (``["header", "query", "body"]``)
        if given; from the sandbox's next request on. Returns its name, hosts and ``in``."""
        body: Dict[str, Any] = {"value": value}
        if hosts is not None:
            body["hosts"] = list(hosts)
        if where is not None:
            body["in"] = list(where)
        return self._client.request("PUT", self._path("secrets", name), json_body=body).json()

    def delete_secret(self, name: str) -> None:
        """Revoke secret ``name``: its placeholder is substituted no more (and is then an
        ordinary string); :class:`NotFound` if the sandbox has no such secret."""
        self._client.request("DELETE", self._path("secrets", name))

    # -- commands ----------------------------------------------------------------------------

    def exec(self, cmd: Union[str, Sequence[str]], cwd: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
             stdin: Union[str, bytes, None] = None, timeout: Optional[int] = None, *,
             tag: Optional[str] = None, encoding: Optional[str] = None) -> ExecResult:
        """Run a command and wait for it.

        ``cmd``: a str runs through ``/bin/sh -c``; a list is an argv (``argv[0]`` looked up
        in PATH). ``stdin``: text written to its stdin, then closed (bytes must be UTF-8;
        use ``processes.start`` for binary input). ``timeout``: seconds (server default 60),
        after which it is killed and ``timed_out`` is true. A command that cannot start
        returns exit code 127 or 126 (its stderr says why, e.g. ``command not found: foo``);
        it does not raise. A sandbox that cannot start another process (its ``pids`` limit)
        raises :class:`QuotaExceeded`.

        Output is text by default: bytes that are not UTF-8, and NUL, come back as U+FFFD.
        ``encoding="base64"`` has the daemon send the exact bytes; they are in the result's
        ``stdout_bytes``/``stderr_bytes`` (and, decoded with replacement, ``stdout``/``stderr``).
        """
        body = command_fields(cmd)
        if isinstance(stdin, (bytes, bytearray)):
            try:
                stdin = bytes(stdin).decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError("exec(stdin=) carries text: bytes must be valid UTF-8; "
                                 "use processes.start(...).send_stdin() for binary data") from None
        for k, v in (("cwd", cwd), ("env", dict(env) if env is not None else None),
                     ("user", user), ("stdin", stdin), ("timeout_s", timeout), ("tag", tag),
                     ("encoding", encoding)):
            if v is not None:
                body[k] = v
        wait: Optional[float] = None
        if self._client.request_timeout is not None:
            secs = timeout if isinstance(timeout, int) and timeout > 0 else _DEFAULT_EXEC_TIMEOUT
            wait = max(self._client.request_timeout, secs + _EXEC_MARGIN)
        r = self._client.request("POST", self._path("exec"), json_body=body, timeout=wait)
        return ExecResult.from_json(r.json())

    run = exec

    # -- the code interpreter (template "code-interpreter") ---------------------------------

    def run_code(self, code: str, language: Optional[str] = None, context: Any = None,
                 on_stdout: Any = None, on_stderr: Any = None, on_result: Any = None,
                 timeout: Optional[int] = None, on_error: Any = None) -> "_code.Execution":
        """Run a cell in a Jupyter kernel; its state stays for the next cell of ``context``
        (a :class:`CodeContext` or its id; None: the language's default one, made on first
        use). ``language``: ``"python"`` or ``"r"`` (None: the context's, else Python). The callbacks get each stdout/stderr text and :class:`Result` as it comes.
        ``timeout``: seconds (server default 300) before the cell is interrupted.

        Raises :class:`NoInterpreter` for a sandbox whose template has no interpreter,
        :class:`NotFound` for an unknown context. An exception in the cell does not raise: it
        is the returned :class:`Execution`'s ``error``."""
        return _code.run_code(self, code, language, context, on_stdout, on_stderr, on_result,
                              timeout, on_error)

    def create_code_context(self, language: str = "python",
                            cwd: Optional[str] = None) -> "_code.CodeContext":
        """A new context (a kernel of its own: ``language`` ``"python"`` or ``"r"``), started
        before this returns; at most 8 a sandbox (:class:`QuotaExceeded`)."""
        body: Dict[str, Any] = {"language": language}
        if cwd is not None:
            body["cwd"] = cwd
        r = self._client.request("POST", self._path("code", "contexts"), json_body=body,
                                 timeout=self._code_wait())
        return _code.CodeContext.from_json(r.json())

    def list_code_contexts(self) -> List["_code.CodeContext"]:
        r = self._client.request("GET", self._path("code", "contexts"))
        return [_code.CodeContext.from_json(c) for c in r.json().get("contexts", [])]

    def remove_code_context(self, context: Any) -> None:
        self._client.request("DELETE", self._path("code", "contexts", _code._context_id(context)))

    def restart_code_context(self, context: Any) -> "_code.CodeContext":
        """A fresh kernel for the context: its variables are gone."""
        r = self._client.request("POST", self._path("code", "contexts", _code._context_id(context),
                                                    "restart"), timeout=self._code_wait())
        return _code.CodeContext.from_json(r.json())

    def _code_wait(self) -> Optional[float]:
        t = self._client.request_timeout
        return None if t is None else max(t, 120.0)  # a kernel's start, under load

    # -- ports -------------------------------------------------------------------------------

    def connect_port(self, port: int, timeout: Optional[float] = 30.0) -> "socket.socket":
        """A connected socket to ``127.0.0.1:port`` inside the sandbox, through cordond and
        the sandbox's agent (``GET .../ports/{port}``, answered 101): send and receive on it
        as on any TCP connection, close it when done. The sandbox needs no network.
        Raises :class:`PortUnreachable` when nothing listens there."""
        conn = self._client.endpoint.new_connection(timeout)
        conn.connect()
        sock, conn.sock = conn.sock, None  # ours now, not http.client's
        hdrs = self._client._headers({"Upgrade": "tcp", "Connection": "Upgrade"}, False, None)
        head = f"GET {self._client._target(self._path('ports', int(port)), None)} HTTP/1.1\r\n"
        head += "Host: cordon\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
        try:
            sock.sendall((head + "\r\n").encode("latin-1"))
            answer = b""
            while b"\r\n\r\n" not in answer and len(answer) < 65536:
                b = sock.recv(1)  # byte by byte: what follows the head is the stream's
                if not b:
                    break
                answer += b
            status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else 0
            if status != 101:
                body = answer.partition(b"\r\n\r\n")[2]
                while True:
                    b = sock.recv(65536)
                    if not b:
                        break
                    body += b
                raise errors.error_from_response(status or 502, body)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        return sock

    # -- metrics -----------------------------------------------------------------------------

    def metrics(self) -> Dict[str, Any]:
        """What the sandbox uses: ``{"current": SAMPLE, "samples": [SAMPLE...],
        "interval_s": 5}``, samples oldest first (five minutes at most); each SAMPLE has
        ``timestamp``, ``cpu_ms`` (in all), ``cpu_pct`` (of one CPU since the sample before),
        ``memory_bytes``, ``disk_used_bytes`` and ``disk_total_bytes``."""
        return self._client.request("GET", self._path("metrics")).json()

    # -- audit -------------------------------------------------------------------------------

    def audit(self) -> List[Dict[str, Any]]:
        """The sandbox's audit records so far, oldest first (dicts as written on the host)."""
        r = self._client.request("GET", self._path("audit"),
                                 headers={"Accept": "application/x-ndjson, application/json"})
        try:
            return r.ndjson()
        except (ValueError, UnicodeDecodeError):
            doc = r.json()  # tolerate a JSON array or {"events": [...]}
            if isinstance(doc, dict):
                doc = doc.get("events", [])
            return list(doc or [])

    def audit_follow(self) -> Iterator[Dict[str, Any]]:
        """Yield the audit records, then new ones as they happen, until the sandbox is
        destroyed (or the generator is closed)."""
        stream = self._client.stream("GET", self._path("audit"), query={"follow": "1"})
        try:
            for line in stream.lines():
                try:
                    yield json.loads(line.decode("utf-8"))
                except (ValueError, UnicodeDecodeError):
                    log.warning("cordon: ignoring an audit line that is not JSON: %r", line[:200])
        finally:
            stream.close()

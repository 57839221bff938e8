"""HTTP/1.1 transport to cordond over a unix socket or TCP, standard library only.

One keep-alive connection per thread per :class:`Client`; streams (process events, followed
audit) get a connection of their own that is closed when the stream ends.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
import urllib.parse
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import errors

DEFAULT_SOCKET = "/run/cordon/cordon.sock"
DEFAULT_REQUEST_TIMEOUT = 120.0

QueryType = Union[Mapping[str, Any], Sequence[Tuple[str, Any]], None]

_USER_AGENT = "cordon-python"

# Errors that mean "the kept-alive connection was closed under us".
_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                 ConnectionAbortedError, http.client.BadStatusLine)
_IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}


class UnixHTTPConnection(http.client.HTTPConnection):
    """An :class:`http.client.HTTPConnection` whose transport is an AF_UNIX stream socket."""

    def __init__(self, path: str, timeout: Optional[float] = None):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Endpoint:
    """Where cordond is: a unix socket path, or an http(s) base URL."""

    def __init__(self, *, socket_path: Optional[str] = None, scheme: str = "unix",
                 host: str = "", port: int = 0, prefix: str = ""):
        self.scheme = scheme
        self.socket_path = socket_path
        self.host = host
        self.port = port
        self.prefix = prefix.rstrip("/")

    @classmethod
    def parse_url(cls, url: str) -> "Endpoint":
        """Parse ``http://host:port[/prefix]``, ``https://...``, ``unix:/path``,
        ``unix:///path`` or ``http+unix://%2Fpath``."""
        u = urllib.parse.urlsplit(url.strip())
        scheme = u.scheme.lower()
        if scheme == "unix":
            path = u.path if not u.netloc else "/" + u.netloc + u.path
            if not path:
                raise ValueError(f"invalid CORDON_URL {url!r}: no socket path")
            return cls(socket_path=path)
        if scheme == "http+unix":
            path = urllib.parse.unquote(u.netloc)
            if not path:
                raise ValueError(f"invalid CORDON_URL {url!r}: no socket path")
            return cls(socket_path=path, prefix=u.path)
        if scheme in ("http", "https"):
            if not u.hostname:
                raise ValueError(f"invalid CORDON_URL {url!r}: no host")
            try:
                port = u.port or (443 if scheme == "https" else 80)
            except ValueError as e:
                raise ValueError(f"invalid CORDON_URL {url!r}: {e}") from None
            return cls(scheme=scheme, host=u.hostname, port=port, prefix=u.path)
        raise ValueError(f"invalid CORDON_URL {url!r}: the scheme must be http, https or unix")

    @property
    def is_unix(self) -> bool:
        return self.scheme == "unix"

    def describe(self) -> str:
        if self.is_unix:
            return f"unix socket {self.socket_path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    def new_connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.is_unix:
            return UnixHTTPConnection(self.socket_path or DEFAULT_SOCKET, timeout=timeout)
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def __repr__(self) -> str:
        return f"Endpoint({self.describe()})"


def resolve_endpoint(socket_path: Optional[str] = None, url: Optional[str] = None,
                     environ: Optional[Mapping[str, str]] = None) -> Endpoint:
    """Pick the endpoint: explicit ``url``, explicit ``socket``, ``$CORDON_URL``,
    ``$CORDON_SOCKET``, then ``/run/cordon/cordon.sock``."""
    env = os.environ if environ is None else environ
    if url and socket_path:
        raise ValueError("give either socket= or url=, not both")
    if url:
        return Endpoint.parse_url(url)
    if socket_path:
        return Endpoint(socket_path=os.fspath(socket_path))
    if env.get("CORDON_URL"):
        return Endpoint.parse_url(env["CORDON_URL"])
    return Endpoint(socket_path=env.get("CORDON_SOCKET") or DEFAULT_SOCKET)


def build_query(query: QueryType) -> str:
    if not query:
        return ""
    items = query.items() if isinstance(query, Mapping) else query
    pairs = []
    for k, v in items:
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        pairs.append((str(k), str(v)))
    if not pairs:
        return ""
    # %20 for spaces and %2B for '+': unambiguous whether the server decodes '+' or not.
    return "?" + urllib.parse.urlencode(pairs, quote_via=urllib.parse.quote, safe="/")


def quote_segment(value: Any) -> str:
    return urllib.parse.quote(str(value), safe="")


class Response:
    """A complete (non-streamed) answer."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        if not self.body:
            return None
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise errors.InternalError(
                "internal", f"cordond answered HTTP {self.status} with a body that is not "
                            f"JSON: {self.body[:200]!r} ({e})", self.status) from None

    def ndjson(self) -> List[Any]:
        out = []
        for line in self.body.splitlines():
            line = line.strip()
            if line:
                out.append(json.loads(line.decode("utf-8")))
        return out


class Stream:
    """A streamed answer on a dedicated connection; iterate :meth:`lines` then close."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.conn = conn
        self.resp = resp
        self.status = resp.status
        self.headers = resp.headers
        self._closed = False

    def readline(self) -> bytes:
        return self.resp.readline()

    def lines(self) -> Iterator[bytes]:
        while True:
            line = self.resp.readline()
            if not line:
                return
            line = line.strip()
            if line:
                yield line

    def json_lines(self) -> Iterator[Any]:
        for line in self.lines():
            yield json.loads(line.decode("utf-8"))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # shutdown() first: it wakes a reader blocked on the socket in another thread.
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self.resp.close()
        except Exception:
            pass
        self.conn.close()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """A connection to cordond. Thread-safe: each thread uses its own keep-alive connection.

    Args:
        socket: unix socket path (default ``$CORDON_SOCKET`` or ``/run/cordon/cordon.sock``).
        url: ``http://host:port`` for TCP (default ``$CORDON_URL``); exclusive with ``socket``.
        api_key: bearer key for TCP (default ``$CORDON_API_KEY``).
        request_timeout: seconds to wait for an answer to an ordinary request.
    """

    def __init__(self, socket: Optional[str] = None, url: Optional[str] = None,
                 api_key: Optional[str] = None,
                 request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
                 environ: Optional[Mapping[str, str]] = None):
        env = os.environ if environ is None else environ
        self.endpoint = resolve_endpoint(socket, url, env)
        self.api_key = api_key if api_key is not None else (env.get("CORDON_API_KEY") or None)
        self.request_timeout = request_timeout
        self._local = threading.local()
        self._all_conns: "List[http.client.HTTPConnection]" = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Client({self.endpoint.describe()})"

    # -- connections -------------------------------------------------------------------------

    def _thread_conn(self) -> Tuple[http.client.HTTPConnection, bool]:
        """The calling thread's connection, and whether it was used before."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.endpoint.new_connection(self.request_timeout)
            self._local.conn = conn
            with self._lock:
                self._all_conns.append(conn)
            return conn, False
        sock = conn.sock
        if sock is None:
            return conn, False
        # A kept-alive socket that is readable now was closed by the server (or holds junk):
        # drop it rather than send a request into it.
        try:
            r, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            r = [sock]
        if r:
            conn.close()
            return conn, False
        return conn, True

    def close(self) -> None:
        """Close every kept-alive connection of this client."""
        with self._lock:
            conns, self._all_conns = self._all_conns, []
        for c in conns:
            try:
                c.close()
            except Exception:
                pass
        self._local = threading.local()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _headers(self, extra: Optional[Mapping[str, str]], has_body: bool,
                 content_type: Optional[str]) -> Dict[str, str]:
        h = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        if has_body and content_type:
            h["Content-Type"] = content_type
        if extra:
            h.update(extra)
        return h

    def _target(self, path: str, query: QueryType) -> str:
        return self.endpoint.prefix + path + build_query(query)

    def _unreachable(self, err: BaseException) -> errors.CordonUnavailable:
        where = self.endpoint.describe()
        hint = ""
        if self.endpoint.is_unix:
            if isinstance(err, FileNotFoundError):
                hint = " (no such socket: is cordond running? set CORDON_SOCKET or pass socket=)"
            elif isinstance(err, ConnectionRefusedError):
                hint = " (nobody listens on it: is cordond running?)"
            elif isinstance(err, PermissionError):
                hint = " (permission denied: the socket is mode 0660; join its group or run as root)"
        elif isinstance(err, ConnectionRefusedError):
            hint = " (is cordond running with --listen? set CORDON_URL)"
        msg = f"cannot reach cordond at {where}: {err.__class__.__name__}: {err}{hint}"
        return errors.CordonUnavailable("unavailable", msg, None)

    @staticmethod
    def _answered_early(conn: http.client.HTTPConnection) -> bool:
        """Whether the server's answer arrived on @conn although sending the body failed."""
        sock = conn.sock
        if sock is None:
            return False
        try:
            r, _, _ = select.select([sock], [], [], 2.0)
            return bool(r) and sock.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    @staticmethod
    def _encode(body: Any, json_body: Any) -> Tuple[Optional[bytes], Optional[str]]:
        if json_body is not None:
            return (json.dumps(json_body, ensure_ascii=False, separators=(",", ":"),
                               allow_nan=False).encode("utf-8"), "application/json")
        if body is None:
            return None, None
        if isinstance(body, str):
            body = body.encode("utf-8")
        return bytes(body), "application/octet-stream"

    # -- requests ----------------------------------------------------------------------------

    def request(self, method: str, path: str, *, query: QueryType = None, json_body: Any = None,
                body: Union[bytes, str, None] = None, headers: Optional[Mapping[str, str]] = None,
                timeout: Optional[float] = -1.0, raise_for_status: bool = True) -> Response:
        """Send one request on this thread's keep-alive connection and read the whole answer.

        ``timeout=-1`` means the client's ``request_timeout``; ``None`` waits for ever.
        """
        data, ctype = self._encode(body, json_body)
        if method in ("POST", "PUT") and data is None:
            data = b""
        hdrs = self._headers(headers, data is not None, ctype)
        target = self._target(path, query)
        tmo = self.request_timeout if timeout == -1.0 else timeout
        attempt = 0
        while True:
            attempt += 1
            conn, reused = self._thread_conn()
            conn.timeout = tmo
            if conn.sock is not None:
                conn.sock.settimeout(tmo)
            sent = False
            try:
                try:
                    conn.request(method, target, body=data, headers=hdrs)
                except (BrokenPipeError, ConnectionResetError):
                    # The daemon may refuse a body (413 over --max-upload, 401, 503) as soon
                    # as it has the headers, and close while we are still sending: its answer
                    # is waiting to be read. Without one, the error stands.
                    if not data or not self._answered_early(conn):
                        raise
                sent = True
                resp = conn.getresponse()
                payload = resp.read()
                status, rheaders = resp.status, resp.headers
                if resp.will_close:
                    conn.close()
                break
            except socket.timeout:
                conn.close()
                raise errors.Timeout(
                    "timeout", f"no answer from cordond at {self.endpoint.describe()} to "
                               f"{method} {path} within {tmo} s", None) from None
            except _STALE_ERRORS as e:
                conn.close()
                if reused and attempt == 1 and (not sent or method in _IDEMPOTENT):
                    continue
                raise self._unreachable(e) from e
            except OSError as e:
                conn.close()
                raise self._unreachable(e) from e
            except http.client.HTTPException as e:
                conn.close()
                raise errors.InternalError(
                    "internal", f"bad HTTP answer from cordond to {method} {path}: {e!r}",
                    None) from e
        r = Response(status, rheaders, payload)
        if raise_for_status and status >= 400:
            raise errors.error_from_response(status, payload, rheaders)
        return r

    def stream(self, method: str, path: str, *, query: QueryType = None, json_body: Any = None,
               headers: Optional[Mapping[str, str]] = None,
               connect_timeout: Optional[float] = -1.0) -> Stream:
        """Send a request on a new connection and return the answer as an open :class:`Stream`.

        The connection waits for ever once the answer has begun (output may be sparse).
        """
        data, ctype = self._encode(None, json_body)
        if method in ("POST", "PUT") and data is None:
            data = b""
        hdrs = self._headers(headers, data is not None, ctype)
        hdrs["Accept"] = "application/x-ndjson, application/json"
        tmo = self.request_timeout if connect_timeout == -1.0 else connect_timeout
        conn = self.endpoint.new_connection(tmo)
        try:
            conn.request(method, self._target(path, query), body=data, headers=hdrs)
            resp = conn.getresponse()
        except socket.timeout:
            conn.close()
            raise errors.Timeout("timeout", f"no answer from cordond at "
                                 f"{self.endpoint.describe()} to {method} {path} within {tmo} s",
                                 None) from None
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if isinstance(e, OSError):
                raise self._unreachable(e) from e
            raise errors.InternalError("internal", f"bad HTTP answer from cordond to {method} "
                                       f"{path}: {e!r}", None) from e
        if resp.status >= 400:
            try:
                payload = resp.read()
            except (OSError, http.client.HTTPException):
                payload = b""
            conn.close()
            raise errors.error_from_response(resp.status, payload, resp.headers)
        if conn.sock is not None:
            conn.sock.settimeout(None)
        return Stream(conn, resp)

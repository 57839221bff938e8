"""Background processes: ``sbx.processes.start(...)`` and the NDJSON event stream."""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import logging
import threading
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Union)

from . import errors
from ._http import Stream
from .models import ProcessInfo, ProcessResult

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

log = logging.getLogger("cordon")

TextCallback = Callable[[str], Any]
BytesCallback = Callable[[bytes], Any]

DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024
_STDIN_CHUNK = 512 * 1024  # raw bytes per request: base64 keeps the JSON body under 1 MiB
_REATTACH_TRIES = 3


def command_fields(cmd: Union[str, Sequence[str]]) -> Dict[str, Any]:
    """A str is a shell command line (``cmd``); a list or tuple is an ``argv``."""
    if isinstance(cmd, str):
        return {"cmd": cmd}
    if isinstance(cmd, (bytes, bytearray)):
        raise TypeError("the command must be a str (shell command line) or a list of str (argv)")
    argv = list(cmd)
    if not argv:
        raise ValueError("argv must not be empty")
    return {"argv": [str(a) if not isinstance(a, str) else a for a in argv]}


_MAX_LINE = 1 << 20  # line mode: a longer line is passed on in pieces of this size


class Process:
    """A process running in a sandbox, fed by its event stream on a background thread.

    Output callbacks run on that thread, in order: ``on_stdout``/``on_stderr`` get ``str``
    (UTF-8, invalid bytes replaced, multi-byte characters never split across calls),
    ``on_stdout_bytes``/``on_stderr_bytes`` the raw bytes, ``on_exit`` the
    :class:`ProcessResult`, and ``on_done`` (no argument) once nothing more will come, with
    an exit or without one (the events could not be followed: :meth:`wait` raises why). An
    exception raised by a callback is logged on the ``cordon`` logger and the stream goes on.

    Chunk mode (the default): ``on_stdout``/``on_stderr`` get the text of each write as the
    process made it, so a chunk may hold several lines or part of one, newlines included.
    Line mode (``lines=True``): they get one line per call, without its ``\n``, and a last
    line without a newline when the process ends; ``on_stdout=print`` then prints the output
    as it was. The ``*_bytes`` callbacks always get raw chunks.

    A slow callback holds back the process (the daemon stops reading its output until this
    client catches up), never the output: every byte arrives, in order.
    """

    def __init__(self, sandbox: "Sandbox", stream: Stream, *,
                 on_stdout: Optional[TextCallback] = None,
                 on_stderr: Optional[TextCallback] = None,
                 on_stdout_bytes: Optional[BytesCallback] = None,
                 on_stderr_bytes: Optional[BytesCallback] = None,
                 on_exit: Optional[Callable[[ProcessResult], Any]] = None,
                 max_output: int = DEFAULT_MAX_OUTPUT, lines: bool = False,
                 on_done: Optional[Callable[[], Any]] = None):
        self.sandbox = sandbox
        self._lines = lines
        self._partial = {"stdout": "", "stderr": ""}
        self._gap = False  # a reattach happened: output in between was not received
        self._stream: Optional[Stream] = stream
        self._cb = {"stdout": (on_stdout, on_stdout_bytes), "stderr": (on_stderr, on_stderr_bytes)}
        self._on_exit = on_exit
        # Called once when nothing more will come: after `exit`, and also when the events
        # could not be followed (a broken stream, a lag, the sandbox gone), which has no exit.
        self._on_done = on_done
        self._max_output = max_output
        self._buf: Dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._truncated = {"stdout": False, "stderr": False}
        self._decoders = {k: codecs.getincrementaldecoder("utf-8")("replace")
                          for k in ("stdout", "stderr")}
        self._done = threading.Event()
        self._result: Optional[ProcessResult] = None
        self._error: Optional[BaseException] = None
        self._detached = False
        self.pid: int = 0
        self.tag: Optional[str] = None

        # The first event (normally `start`) is read here so that .pid is known on return.
        first = self._next_event()
        if first is None:
            stream.close()
            raise errors.InternalError(
                "internal", "the process event stream ended before its start event", None)
        if not isinstance(first.get("pid"), int):
            stream.close()
            raise errors.InternalError(
                "internal", f"process event without an integer pid: {first!r}", None)
        self.pid = first["pid"]
        if isinstance(first.get("tag"), str):
            self.tag = first["tag"]
        if first.get("type") != "start":
            self._handle(first)
        if self._done.is_set():
            self._close_stream()
            self._thread = None
            self._notify_done()
        else:
            self._thread = threading.Thread(target=self._run, name=f"cordon-process-{self.pid}",
                                            daemon=True)
            self._thread.start()

    def __repr__(self) -> str:
        state = "running" if not self._done.is_set() else f"exited({self.exit_code})"
        return f"<cordon.Process pid={self.pid} {state} sandbox={self.sandbox.id}>"

    # -- the stream --------------------------------------------------------------------------

    def _next_event(self) -> Optional[Dict[str, Any]]:
        stream = self._stream
        if stream is None:
            return None
        while True:
            line = stream.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                ev = json.loads(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                log.warning("cordon: ignoring a process event that is not JSON: %r", line[:200])
                continue
            if isinstance(ev, dict):
                return ev
            log.warning("cordon: ignoring a process event that is not an object: %r", ev)

    def _emit(self, kind: str, data: bytes) -> None:
        buf = self._buf[kind]
        room = self._max_output - len(buf)
        if room >= len(data):
            buf += data
        else:
            if room > 0:
                buf += data[:room]
            self._truncated[kind] = True
        text_cb, bytes_cb = self._cb[kind]
        try:
            if bytes_cb is not None:
                bytes_cb(data)
            if text_cb is not None:
                text = self._decoders[kind].decode(data)
                if text:
                    self._text(kind, text_cb, text)
        except Exception:
            log.exception("cordon: the %s callback of process %s raised", kind, self.pid)

    def _text(self, kind: str, cb: TextCallback, text: str, final: bool = False) -> None:
        """Chunk mode: @text as it came. Line mode: each complete line, without its newline."""
        if not self._lines:
            if text:
                cb(text)
            return
        text = self._partial[kind] + text
        *done, rest = text.split("\n")
        while len(rest) > _MAX_LINE:
            done.append(rest[:_MAX_LINE])
            rest = rest[_MAX_LINE:]
        if final and rest:
            done.append(rest)
            rest = ""
        self._partial[kind] = rest
        for line in done:
            cb(line)

    def _handle(self, ev: Dict[str, Any]) -> None:
        t = ev.get("type")
        if t in ("stdout", "stderr"):
            try:
                data = base64.b64decode(ev.get("data") or "", validate=True)
            except (binascii.Error, TypeError, ValueError):
                log.warning("cordon: process %s sent %s data that is not base64", self.pid, t)
                return
            if data:
                self._emit(t, data)
        elif t == "exit":
            self._finish(ev)
        elif t == "lagged":
            # the daemon cut this stream: what follows was never received, so there is no
            # result to give; wait() raises this instead of a partial success
            msg = ev.get("message") if isinstance(ev.get("message"), str) else "lagged"
            self._error = errors.StreamLagged(
                "lagged", f"process {self.pid}: {msg} (received {len(self._buf['stdout'])} "
                          f"bytes of stdout, {len(self._buf['stderr'])} of stderr)", None)
            self._done.set()
        elif t == "start":
            pass  # a reattached stream starts again
        else:
            log.debug("cordon: ignoring process event %r", ev)

    def _finish(self, ev: Dict[str, Any]) -> None:
        # flush what the incremental decoders hold back
        for kind in ("stdout", "stderr"):
            text_cb, _ = self._cb[kind]
            tail = self._decoders[kind].decode(b"", final=True)
            if text_cb is not None:
                try:
                    self._text(kind, text_cb, tail, final=True)
                except Exception:
                    log.exception("cordon: the %s callback of process %s raised", kind, self.pid)
        out, err = bytes(self._buf["stdout"]), bytes(self._buf["stderr"])
        self._result = ProcessResult(
            pid=self.pid,
            exit_code=ev.get("exit_code", -1),
            signal=ev.get("signal", 0) or 0,
            timed_out=bool(ev.get("timed_out", False)),
            oom=bool(ev.get("oom", False)),
            duration_ms=ev.get("duration_ms", 0) or 0,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            stdout_bytes=out,
            stderr_bytes=err,
            stdout_truncated=self._truncated["stdout"] or self._gap,
            stderr_truncated=self._truncated["stderr"] or self._gap,
            raw=ev,
        )
        self._done.set()
        if self._on_exit is not None:
            try:
                self._on_exit(self._result)
            except Exception:
                log.exception("cordon: the on_exit callback of process %s raised", self.pid)

    def _close_stream(self) -> None:
        s, self._stream = self._stream, None
        if s is not None:
            s.close()

    def _reattach(self) -> bool:
        """The stream broke before `exit`: follow the process again from now on."""
        last: Optional[BaseException] = None
        for i in range(_REATTACH_TRIES):
            if self._detached:
                return False
            try:
                self._stream = self.sandbox._client.stream(
                    "GET", self.sandbox._path("processes", self.pid, "events"))
                # what the process wrote meanwhile is not replayed: say so in the result
                self._gap = True
                log.warning("cordon: process %s: its event stream broke; reattached, output "
                            "in between is lost (the result says truncated)", self.pid)
                return True
            except errors.NotFound as e:
                self._error = errors.NotFound(
                    e.code, f"process {self.pid}: its event stream broke and the daemon no "
                            f"longer knows it ({e.message})", e.status)
                return False
            except errors.CordonError as e:
                last = e
                time.sleep(0.2 * (i + 1))
        self._error = last or errors.CordonUnavailable(
            "unavailable", f"process {self.pid}: lost its event stream", None)
        return False

    def _run(self) -> None:
        try:
            while not self._done.is_set():
                try:
                    ev = self._next_event()
                except (OSError, ValueError, AttributeError) as e:
                    # AttributeError/ValueError: http.client after close() from another thread
                    if self._detached:
                        return
                    log.debug("cordon: process %s stream error: %r", self.pid, e)
                    ev = None
                if ev is not None:
                    self._handle(ev)
                    continue
                if self._detached:
                    return
                self._close_stream()
                if not self._reattach():
                    if self._error is None:
                        self._error = errors.CordonUnavailable(
                            "unavailable", f"process {self.pid}: lost its event stream", None)
                    return
        except BaseException as e:  # pragma: no cover - defensive
            self._error = e
        finally:
            self._close_stream()
            self._done.set()
            self._notify_done()

    def _notify_done(self) -> None:
        if self._on_done is not None:
            try:
                self._on_done()
            except Exception:
                log.exception("cordon: the on_done callback of process %s raised", self.pid)

    # -- public API --------------------------------------------------------------------------

    @property
    def exited(self) -> bool:
        return self._result is not None

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code, or ``None`` while it runs."""
        return self._result.exit_code if self._result is not None else None

    @property
    def result(self) -> Optional[ProcessResult]:
        return self._result

    @property
    def error(self) -> Optional[BaseException]:
        """Why its events ended without an exit (a :class:`CordonError`), or None."""
        return self._error

    @property
    def stdout(self) -> str:
        """The output received so far."""
        return bytes(self._buf["stdout"]).decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return bytes(self._buf["stderr"]).decode("utf-8", "replace")

    def wait(self, timeout: Optional[float] = None) -> ProcessResult:
        """Wait for the process to end and return its :class:`ProcessResult`.

        Raises the built-in :class:`TimeoutError` when ``timeout`` seconds pass first (the
        process keeps running), or a :class:`CordonError` if its events could not be followed.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"process {self.pid} still runs after {timeout} s")
        if self._result is None:
            if self._error is not None:
                raise self._error
            raise errors.CordonUnavailable(
                "unavailable", f"process {self.pid}: detached before it exited", None)
        return self._result

    def send_stdin(self, data: Union[bytes, bytearray, memoryview, str], eof: bool = False) -> None:
        """Write to the process's stdin (a str is encoded as UTF-8); ``eof=True`` closes it after."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        data = bytes(data)
        path = self.sandbox._path("processes", self.pid, "stdin")
        if not data:
            if eof:
                self.sandbox._client.request("POST", path, json_body={"eof": True})
            return
        for off in range(0, len(data), _STDIN_CHUNK):
            chunk = data[off:off + _STDIN_CHUNK]
            body: Dict[str, Any] = {"data": base64.b64encode(chunk).decode("ascii")}
            if eof and off + _STDIN_CHUNK >= len(data):
                body["eof"] = True
            self.sandbox._client.request("POST", path, json_body=body)

    def close_stdin(self) -> None:
        """Close the process's stdin (it reads end of file)."""
        self.sandbox._client.request("POST", self.sandbox._path("processes", self.pid, "stdin"),
                                     json_body={"eof": True})

    def signal(self, sig: Union[str, int] = "TERM") -> None:
        """Send a signal: a name with or without ``SIG`` (``"TERM"``, ``"SIGINT"``) or a number."""
        if isinstance(sig, bool) or not isinstance(sig, (str, int)):
            raise TypeError("signal must be a name or a number")
        value: Union[str, int] = sig.upper() if isinstance(sig, str) else int(sig)
        self.sandbox._client.request("POST", self.sandbox._path("processes", self.pid, "signal"),
                                     json_body={"signal": value})

    def kill(self) -> bool:
        """SIGKILL the process. Returns False if it had already exited."""
        try:
            self.signal("KILL")
            return True
        except (errors.NotFound, errors.Conflict):
            return False

    def detach(self) -> None:
        """Stop following the process (it keeps running; reattach with ``processes.connect``)."""
        self._detached = True
        self._close_stream()

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._done.is_set():
            self.kill()
            try:
                self.wait(10)
            except (TimeoutError, errors.CordonError):
                pass


class Processes:
    """``sbx.processes``: start, list and reattach to background processes."""

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    def start(self, cmd: Union[str, Sequence[str]], on_stdout: Optional[TextCallback] = None,
              on_stderr: Optional[TextCallback] = None, *, cwd: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
              timeout: Optional[int] = None, tag: Optional[str] = None,
              on_stdout_bytes: Optional[BytesCallback] = None,
              on_stderr_bytes: Optional[BytesCallback] = None,
              on_exit: Optional[Callable[[ProcessResult], Any]] = None,
              max_output: int = DEFAULT_MAX_OUTPUT, lines: bool = False) -> Process:
        """Start a process and return at once with its :class:`Process`.

        ``cmd``: a str runs through ``/bin/sh -c``; a list is an argv. ``timeout``: seconds
        before it is killed (server default 60; ``0``: as long as the sandbox lives).
        ``user``: ``"user"`` (uid 1000, default) or ``"root"``. Its stdin is a pipe fed by
        :meth:`Process.send_stdin`. The output it prints is kept (up to ``max_output`` bytes
        per stream) for :meth:`Process.wait`'s result. ``lines=True``: ``on_stdout`` and
        ``on_stderr`` get whole lines without their newline (``on_stdout=print`` works);
        otherwise each write's text as it came (see :class:`Process`).

        Raises :class:`QuotaExceeded` when the sandbox cannot start another process.
        """
        body = command_fields(cmd)
        for k, v in (("cwd", cwd), ("env", dict(env) if env is not None else None),
                     ("user", user), ("timeout_s", timeout), ("tag", tag)):
            if v is not None:
                body[k] = v
        sbx = self._sandbox
        stream = sbx._client.stream("POST", sbx._path("processes"), json_body=body)
        return Process(sbx, stream, on_stdout=on_stdout, on_stderr=on_stderr,
                       on_stdout_bytes=on_stdout_bytes, on_stderr_bytes=on_stderr_bytes,
                       on_exit=on_exit, max_output=max_output, lines=lines)

    def run(self, cmd: Union[str, Sequence[str]], **kwargs: Any) -> ProcessResult:
        """``start(cmd, **kwargs).wait()``."""
        return self.start(cmd, **kwargs).wait()

    def list(self) -> List[ProcessInfo]:
        """The processes started through the API that still run."""
        sbx = self._sandbox
        doc = sbx._client.request("GET", sbx._path("processes")).json() or {}
        return [ProcessInfo.from_json(p) for p in doc.get("processes", [])]

    def connect(self, pid: int, on_stdout: Optional[TextCallback] = None,
                on_stderr: Optional[TextCallback] = None, *,
                on_stdout_bytes: Optional[BytesCallback] = None,
                on_stderr_bytes: Optional[BytesCallback] = None,
                on_exit: Optional[Callable[[ProcessResult], Any]] = None,
                max_output: int = DEFAULT_MAX_OUTPUT, lines: bool = False) -> Process:
        """Reattach to a process by pid: its output from now on, then its exit.

        For a process that has already exited (and that the daemon still remembers) the
        returned :class:`Process` is already finished."""
        sbx = self._sandbox
        stream = sbx._client.stream("GET", sbx._path("processes", int(pid), "events"))
        return Process(sbx, stream, on_stdout=on_stdout, on_stderr=on_stderr,
                       on_stdout_bytes=on_stdout_bytes, on_stderr_bytes=on_stderr_bytes,
                       on_exit=on_exit, max_output=max_output, lines=lines)

    def signal(self, pid: int, sig: Union[str, int] = "TERM") -> None:
        """Send a signal to a process by pid."""
        sbx = self._sandbox
        value: Union[str, int] = sig.upper() if isinstance(sig, str) else int(sig)
        sbx._client.request("POST", sbx._path("processes", int(pid), "signal"),
                            json_body={"signal": value})

    def kill(self, pid: int) -> bool:
        """SIGKILL a process by pid; False if it no longer runs."""
        try:
            self.signal(pid, "KILL")
            return True
        except (errors.NotFound, errors.Conflict):
            return False

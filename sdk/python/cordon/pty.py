"""Interactive processes on a pseudo-terminal: ``sbx.pty.create(cols, rows, cmd)``.

The terminal lives inside the sandbox (its own devpts); the process leads a new session with
it as its controlling terminal, so job control, Ctrl-C (send ``"\\x03"``) and full-screen
programs work. Its output (stdout and stderr are the terminal) comes as bytes: iterate the
handle, or pass ``on_data``. A reader that does not keep up holds the process back (the
daemon pauses its output at the source); nothing is buffered without bound here either.
"""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from .models import ProcessResult
from .processes import Process, command_fields

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

_END = object()
_QUEUE_CHUNKS = 256  # chunks held for the iterator; past that the stream's reader waits


class PtyProcess:
    """A process on a terminal. ``for chunk in handle`` yields its output (bytes) until it
    exits; :meth:`send_input`, :meth:`resize`, :meth:`kill`, :meth:`wait`."""

    def __init__(self, sandbox: "Sandbox", stream: Any,
                 on_data: Optional[Callable[[bytes], Any]] = None):
        self._sandbox = sandbox
        self._q: "queue.Queue[Any]" = queue.Queue(maxsize=_QUEUE_CHUNKS)
        self._on_data = on_data

        def data(b: bytes) -> None:
            if self._on_data is not None:
                self._on_data(b)
            else:
                self._q.put(b)

        # The end is queued whenever the process's events end, with its exit or without
        # (a broken stream, the sandbox gone): an iterator must never wait for ever.
        self.process = Process(sandbox, stream, on_stdout_bytes=data,
                               on_done=lambda: self._q.put(_END), max_output=1 << 20)
        self.pid = self.process.pid

    def __iter__(self) -> Iterator[bytes]:
        """The output until the process exits; raises what :meth:`wait` would when its events
        ended without an exit (a :class:`CordonError`)."""
        while True:
            item = self._q.get()
            if item is _END:
                self._q.put(_END)  # a second iterator ends too
                p = self.process
                if p.result is None and p.error is not None:
                    raise p.error
                return
            yield item

    def send_input(self, data: Union[bytes, str]) -> None:
        """Bytes (or UTF-8 text) typed at the terminal: ``"ls\\n"``, ``"\\x03"`` for Ctrl-C."""
        self.process.send_stdin(data)

    def resize(self, cols: int, rows: int) -> None:
        """The terminal's new size; its foreground process gets SIGWINCH."""
        sbx = self._sandbox
        sbx._client.request("POST", sbx._path("processes", self.pid, "resize"),
                            json_body={"cols": int(cols), "rows": int(rows)})

    def kill(self) -> bool:
        """SIGKILL the process and every process of its session; False if it had exited."""
        return self.process.kill()

    def wait(self, timeout: Optional[float] = None) -> ProcessResult:
        return self.process.wait(timeout)

    @property
    def exit_code(self) -> Optional[int]:
        return self.process.exit_code


class Pty:
    """``sbx.pty``: processes on a pseudo-terminal."""

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    def create(self, cols: int = 80, rows: int = 24,
               cmd: Union[str, Sequence[str]] = ("bash", "-i"), *,
               env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
               user: Optional[str] = None, timeout: Optional[int] = 0,
               on_data: Optional[Callable[[bytes], Any]] = None) -> PtyProcess:
        """Start ``cmd`` (a shell line or an argv; an interactive bash by default) on a
        ``cols`` x ``rows`` terminal. ``TERM`` is ``xterm-256color`` unless ``env`` says.
        ``timeout``: seconds before it is killed (``0``, the default: as long as the sandbox
        lives)."""
        body = command_fields(cmd)
        body["pty"] = {"cols": int(cols), "rows": int(rows)}
        for k, v in (("cwd", cwd), ("env", dict(env) if env is not None else None),
                     ("user", user), ("timeout_s", timeout)):
            if v is not None:
                body[k] = v
        sbx = self._sandbox
        stream = sbx._client.stream("POST", sbx._path("processes"), json_body=body)
        return PtyProcess(sbx, stream, on_data)

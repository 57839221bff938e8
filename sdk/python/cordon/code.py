"""The code interpreter: cells run in Jupyter kernels inside a sandbox of the
``code-interpreter`` template, their state kept between cells of a context.

    with Sandbox.create(template="code-interpreter") as sbx:
        sbx.run_code("x = 41")
        print(sbx.run_code("x + 1").text)          # 42
        ex = sbx.run_code("import matplotlib.pyplot as plt; plt.plot([1, 2])")
        png = ex.results[0].png                   # base64 PNG, no savefig needed

A cell's events stream as they happen (``on_stdout``, ``on_stderr``, ``on_result``); the
:class:`Execution` returned holds them all.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from . import errors

if TYPE_CHECKING:
    from .sandbox import Sandbox

log = logging.getLogger("cordon")

_MIME = {"text": "text/plain", "html": "text/html", "markdown": "text/markdown",
         "svg": "image/svg+xml", "png": "image/png", "jpeg": "image/jpeg",
         "pdf": "application/pdf", "latex": "text/latex", "json": "application/json",
         "javascript": "application/javascript"}


@dataclass
class Result:
    """One output of a cell, as a MIME bundle (``data``: MIME type -> string; images and PDF
    are base64). ``is_main``: the cell's value (``Out[n]``) rather than a display (a plot).
    ``chart``: a matplotlib figure described as data (its type, title, axis labels and
    elements, in E2B's shape: README.md, "Charts"), or None."""

    data: Dict[str, str]
    is_main: bool = False
    chart: Optional[Dict[str, Any]] = None

    def _get(self, kind: str) -> Optional[str]:
        return self.data.get(_MIME[kind])

    text = property(lambda self: self._get("text"))
    html = property(lambda self: self._get("html"))
    markdown = property(lambda self: self._get("markdown"))
    svg = property(lambda self: self._get("svg"))
    png = property(lambda self: self._get("png"))
    jpeg = property(lambda self: self._get("jpeg"))
    pdf = property(lambda self: self._get("pdf"))
    latex = property(lambda self: self._get("latex"))
    javascript = property(lambda self: self._get("javascript"))

    @property
    def json(self) -> Any:
        """``application/json`` parsed (a DataFrame's records, say), or None."""
        v = self._get("json")
        return json.loads(v) if v is not None else None

    def image_bytes(self, kind: str = "png") -> Optional[bytes]:
        """The decoded bytes of ``png``, ``jpeg`` or ``pdf``, or None."""
        v = self._get(kind)
        return base64.b64decode(v) if v is not None else None

    def formats(self) -> List[str]:
        """The short names (``"text"``, ``"png"``, ...) this result has."""
        return [k for k, m in _MIME.items() if m in self.data] + (["chart"] if self.chart else [])


@dataclass
class ExecutionError:
    """The exception a cell raised: ``name`` (``ZeroDivisionError``), ``value`` (its
    message) and the whole ``traceback`` as text."""

    name: str
    value: str
    traceback: str


@dataclass
class Logs:
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class Execution:
    """What a cell did. ``truncated``: its output passed the server's bound and was cut;
    ``timed_out``: it ran past its timeout and was interrupted (its kernel restarted if the
    interrupt did not end it)."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    truncated: bool = False
    timed_out: bool = False

    @property
    def text(self) -> Optional[str]:
        """The ``text/plain`` of the cell's value (its main result), or None."""
        for r in self.results:
            if r.is_main:
                return r.text
        return None


@dataclass
class CodeContext:
    """A kernel of its own: variables, imports and working directory."""

    id: str
    language: str
    cwd: str

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "CodeContext":
        return cls(d["id"], d.get("language", "python"), d.get("cwd", ""))


def _context_id(context: Any) -> Optional[str]:
    return context.id if isinstance(context, CodeContext) else context


def _apply(ex: Execution, ev: Dict[str, Any], on_stdout: Optional[Callable[[str], Any]],
           on_stderr: Optional[Callable[[str], Any]],
           on_result: Optional[Callable[[Result], Any]],
           on_error: Optional[Callable[[ExecutionError], Any]]) -> bool:
    """Adds one event to @ex and calls its callback; True at the end."""
    t = ev.get("type")
    if t in ("stdout", "stderr"):
        text = ev.get("text", "")
        getattr(ex.logs, t).append(text)
        cb = on_stdout if t == "stdout" else on_stderr
        if cb:
            cb(text)
    elif t == "result":
        r = Result(dict(ev.get("data") or {}), bool(ev.get("is_main")), ev.get("chart"))
        ex.results.append(r)
        if on_result:
            on_result(r)
    elif t == "error":
        ex.error = ExecutionError(ev.get("name", ""), ev.get("value", ""), ev.get("traceback", ""))
        if on_error:
            on_error(ex.error)
    elif t == "end":
        ex.execution_count = ev.get("execution_count")
        ex.truncated = bool(ev.get("truncated"))
        ex.timed_out = bool(ev.get("timed_out"))
        return True
    else:
        log.debug("cordon: ignoring a code event of type %r", t)
    return False


def run_code(sbx: "Sandbox", code: str, language: Optional[str] = None, context: Any = None,
             on_stdout: Optional[Callable[[str], Any]] = None,
             on_stderr: Optional[Callable[[str], Any]] = None,
             on_result: Optional[Callable[[Result], Any]] = None,
             timeout: Optional[int] = None,
             on_error: Optional[Callable[[ExecutionError], Any]] = None) -> Execution:
    body: Dict[str, Any] = {"code": code}
    if language is not None:  # else the context's (a context of R needs no language)
        body["language"] = language
    if context is not None:
        body["context"] = _context_id(context)
    if timeout is not None:
        body["timeout_s"] = timeout
    ex = Execution()
    stream = sbx.client.stream("POST", sbx._path("code"), json_body=body)
    try:
        for ev in stream.json_lines():
            if isinstance(ev, dict) and _apply(ex, ev, on_stdout, on_stderr, on_result, on_error):
                return ex
    finally:
        stream.close()
    raise errors.InternalError("internal", "the cell's event stream ended without its end event")

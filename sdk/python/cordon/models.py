"""Plain result objects built from the daemon's JSON answers.

Each keeps the whole JSON object it was built from in ``raw``, so fields a newer daemon adds
are never lost. Timestamps are kept as the RFC 3339 strings the daemon sent.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def _pick(cls: Any, doc: Dict[str, Any], **extra: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in doc.items() if k in names}
    kwargs.update(extra)
    kwargs["raw"] = doc
    return cls(**kwargs)


@dataclass
class SandboxInfo:
    """A sandbox as the daemon describes it (``GET /v1/sandboxes/{id}``)."""
    id: str
    template: str = ""
    runtime: str = ""
    state: str = ""
    created_at: str = ""
    expires_at: str = ""
    timeout_s: int = 0
    limits: Dict[str, Any] = field(default_factory=dict)
    network: Dict[str, Any] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)
    secrets: List[Dict[str, Any]] = field(default_factory=list)  # names, hosts, in: no value
    volumes: List[Dict[str, Any]] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "SandboxInfo":
        return _pick(cls, doc)


@dataclass
class ExecResult:
    """The outcome of :meth:`Sandbox.exec`.

    ``exit_code`` is -1 when a signal killed the command (then ``signal`` is set);
    ``stdout``/``stderr`` are UTF-8 text with invalid bytes replaced, cut at the server's cap
    (``stdout_truncated``/``stderr_truncated``).
    """
    exit_code: int
    signal: int = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    oom: bool = False
    duration_ms: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    # exec(..., encoding="base64"): the exact bytes (NUL and invalid UTF-8 included); with
    # the default text encoding, stdout/stderr encoded as UTF-8.
    stdout_bytes: bytes = field(default=b"", repr=False)
    stderr_bytes: bytes = field(default=b"", repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "ExecResult":
        orig, doc = doc, dict(doc)
        out = {}
        for k in ("stdout", "stderr"):
            v = doc.get(k) if isinstance(doc.get(k), str) else ""
            if doc.get("encoding") == "base64":
                out[k + "_bytes"] = base64.b64decode(v)
                doc[k] = out[k + "_bytes"].decode("utf-8", "replace")
            else:
                out[k + "_bytes"] = v.encode("utf-8")
        res = _pick(cls, doc, **out)
        res.raw = orig
        return res

    @property
    def ok(self) -> bool:
        """True when the command exited with 0 by itself."""
        return self.exit_code == 0 and not self.signal and not self.timed_out


@dataclass
class ProcessResult:
    """The outcome of a process started with ``sbx.processes.start`` (its ``exit`` event),
    with the output this client received (``stdout``/``stderr``, decoded as UTF-8 with
    replacement; ``stdout_bytes``/``stderr_bytes`` raw)."""
    pid: int
    exit_code: int
    signal: int = 0
    timed_out: bool = False
    oom: bool = False
    duration_ms: int = 0
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: bytes = field(default=b"", repr=False)
    stderr_bytes: bytes = field(default=b"", repr=False)
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.signal and not self.timed_out


@dataclass
class ProcessInfo:
    """A running process (``GET /v1/sandboxes/{id}/processes``)."""
    pid: int
    argv: List[str] = field(default_factory=list)
    cwd: str = ""
    user: str = ""
    started_at: str = ""
    tag: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "ProcessInfo":
        return _pick(cls, doc)


@dataclass
class FileEntry:
    """A file's metadata. ``type`` is ``file``, ``dir``, ``symlink`` or ``other``;
    ``mode`` the permission bits (420 == 0o644)."""
    name: str
    path: str
    type: str = "file"
    size: int = 0
    mode: int = 0
    mtime: str = ""
    symlink_target: Optional[str] = None
    # Set only when the name is not valid UTF-8: then ``name``/``path`` show it with U+FFFD
    # and these hold the exact bytes in base64 (see ``name_bytes``/``path_bytes``).
    name_b64: Optional[str] = None
    path_b64: Optional[str] = None
    symlink_target_b64: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "FileEntry":
        return _pick(cls, doc)

    @staticmethod
    def _exact(text: str, b64: Optional[str]) -> bytes:
        return base64.b64decode(b64) if b64 else text.encode("utf-8")

    @property
    def name_bytes(self) -> bytes:
        """The exact bytes of the name, UTF-8 or not."""
        return self._exact(self.name, self.name_b64)

    @property
    def path_bytes(self) -> bytes:
        """The exact bytes of the path; every ``sbx.files`` method that takes a path takes it."""
        return self._exact(self.path, self.path_b64)

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

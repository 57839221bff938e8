"""Typed exceptions for the Cordon API.

Every error answer of ``cordond`` is ``{"error": {"code": "...", "message": "..."}}`` with a
matching HTTP status; :func:`error_from_response` turns it into the subclass of
:class:`CordonError` registered for its stable ``code``. A daemon that cannot be reached at
all raises :class:`CordonUnavailable`, which is also a built-in :class:`ConnectionError`.
"""

from __future__ import annotations

import json
from typing import Dict, Mapping, Optional, Type



class CordonError(Exception):
    """An error answered by cordond (or raised by the SDK on its behalf).

    Attributes:
        code: the stable error code (``"not_found"``, ``"invalid_field"``, ...).
        message: the daemon's one-line message; it names the offending field if any.
        status: the HTTP status, or ``None`` when no answer was received.
        retry_after: the ``Retry-After`` header in seconds, when the daemon sent one.
    """

    code: str = "error"
    default_status: Optional[int] = None

    def __init__(self, code: Optional[str] = None, message: str = "",
                 status: Optional[int] = None, retry_after: Optional[float] = None):
        self.code = code or type(self).code
        self.message = message
        self.status = status if status is not None else type(self).default_status
        self.retry_after = retry_after
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = f"{self.status} " if self.status else ""
        return f"{where}{self.code}: {self.message}" if self.message else f"{where}{self.code}"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
                f"status={self.status!r})")

    def __reduce__(self):  # keep pickling (multiprocessing) working
        return (_rebuild, (type(self), self.code, self.message, self.status, self.retry_after))


def _rebuild(cls, code, message, status, retry_after):
    return cls(code, message, status, retry_after)


class BadRequest(CordonError):
    """400: the request is malformed (not JSON, duplicate key, too deep...)."""
    code = "bad_request"
    default_status = 400


class InvalidField(BadRequest):
    """400: a field has the wrong type, is out of range, too long or holds a NUL."""
    code = "invalid_field"


class UnknownField(BadRequest):
    """400: a field (or query parameter) the API does not know."""
    code = "unknown_field"


class UnsupportedRuntime(BadRequest):
    """400: the runtime asked for is one this server cannot run (the message names the ones it
    can, and why not: ``"not built yet"``, no KVM...)."""
    code = "unsupported_runtime"


class PayloadTooLarge(CordonError):
    """413: the body is over the limit (1 MiB for JSON bodies)."""
    code = "payload_too_large"
    default_status = 413


class NotFound(CordonError):
    """404: no such sandbox, template, process or file."""
    code = "not_found"
    default_status = 404


class Conflict(CordonError):
    """409: the sandbox, process or file is not in a state that allows this."""
    code = "conflict"
    default_status = 409


class QuotaExceeded(CordonError):
    """429: the principal's quota (sandboxes, processes, disk) is used up."""
    code = "quota_exceeded"
    default_status = 429


class CapacityError(CordonError):
    """503: the host has no room for another sandbox or process; retry later."""
    code = "capacity"
    default_status = 503


class Unauthorized(CordonError):
    """401: TCP without a valid bearer API key."""
    code = "unauthorized"
    default_status = 401


class Forbidden(CordonError):
    """403: the principal may not do this."""
    code = "forbidden"
    default_status = 403


class InternalError(CordonError):
    """500: a bug or an unexpected failure in the daemon."""
    code = "internal"
    default_status = 500


class Unavailable(CordonError):
    """503: the daemon or the sandbox's agent cannot serve now."""
    code = "unavailable"
    default_status = 503


class CordonUnavailable(Unavailable, ConnectionError):
    """cordond could not be reached at all (not running, wrong socket/URL, connection lost).

    It is both an :class:`Unavailable` and a built-in :class:`ConnectionError`.
    """
    default_status = None


class Timeout(CordonError):
    """504 from the daemon, or no answer from the daemon within the request timeout."""
    code = "timeout"
    default_status = 504


# -- what file operations and streams run into (issue 10) -----------------------------------
# Specific codes of the daemon's file operations; each is a subclass of the general class of
# its status, so ``except Conflict`` still catches ``IsADirectory``.


class InvalidPath(BadRequest):
    """400 ``invalid_path``: the path cannot be used: relative (raised by the SDK itself before
    any request), a symlink loop, a name too long, not a regular file where one is needed."""
    code = "invalid_path"


class ReadOnly(Conflict):
    """409 ``read_only``: that part of the sandbox is read-only (the template's image)."""
    code = "read_only"


class NoSpace(Conflict):
    """409 ``no_space``: the sandbox's disk (``limits.disk_mb``) is full; free space in it."""
    code = "no_space"


class NotADirectory(Conflict):
    """409 ``not_a_directory``: a component of the path (or the listed path) is not a directory."""
    code = "not_a_directory"


class IsADirectory(Conflict):
    """409 ``is_a_directory``: the path is a directory where a file is needed."""
    code = "is_a_directory"


class CrossDevice(Conflict):
    """409 ``cross_device``: a move between two file systems of the sandbox (e.g. /tmp and
    /dev/shm); copy and remove instead."""
    code = "cross_device"


# -- volumes (issue 14) --------------------------------------------------------------------


class VolumeInUse(Conflict):
    """409 ``volume_in_use``: the volume is mounted read-write by another sandbox, or by
    another process (``cordon run --volume``); or, for a delete, mounted at all."""
    code = "volume_in_use"


class VolumeExists(Conflict):
    """409 ``volume_exists``: a volume of that name exists."""
    code = "volume_exists"


class InsufficientStorage(CordonError):
    """507 ``insufficient_storage``: more than the host's disk can hold (a volume bigger
    than its free space)."""
    code = "insufficient_storage"
    default_status = 507


class UnsafeArchive(BadRequest):
    """400 ``unsafe_archive``: a directory's tar (uploaded, or made in the sandbox) with an
    absolute name, ``..``, a link out of its tree, a device or fifo, or malformed. Nothing
    was unpacked."""
    code = "unsafe_archive"


class NotATerminal(Conflict):
    """409 ``not_a_terminal``: a resize of a process that was started without a pty."""
    code = "not_a_terminal"


class PortUnreachable(CordonError):
    """502 ``port_unreachable``: nothing accepts connections on that port inside the
    sandbox."""
    code = "port_unreachable"
    default_status = 502


class StreamLagged(CordonError):
    """A process's event stream was cut because this client fell too far behind (the daemon's
    ``lagged`` event). Output after that point was not received, so the result is unknown;
    the process itself runs on. Raised by :meth:`Process.wait`, never a silent success."""
    code = "lagged"


class MethodNotAllowed(CordonError):
    """405 ``method_not_allowed``: the path exists but does not take this method (the answer's
    ``Allow`` header says which it takes)."""
    code = "method_not_allowed"
    default_status = 405


class LengthRequired(CordonError):
    """411 ``length_required``: a body with neither Content-Length nor chunked encoding."""
    code = "length_required"
    default_status = 411


class AuditUnavailable(Unavailable):
    """503 ``audit_unavailable``: the action's audit record could not be written (the
    daemon's disk is full, say), so the action was refused and nothing was done. Retry later."""
    code = "audit_unavailable"


class SandboxPaused(Conflict):
    """409 ``sandbox_paused``: the sandbox is paused; :meth:`Sandbox.resume` it first."""
    code = "sandbox_paused"


class SandboxBusy(Conflict):
    """409 ``sandbox_busy``: a snapshot (or fork) of the sandbox is being made; everything
    but its info, destroy, timeout and audit log waits for it: try again when it answers."""
    code = "sandbox_busy"


class SnapshotLimit(CordonError):
    """507 ``snapshot_limit``: the snapshots kept reach the server's total size cap
    (``--max-snapshot-bytes``); delete some (:meth:`Snapshots.delete`)."""
    code = "snapshot_limit"
    default_status = 507


class NoInterpreter(Conflict):
    """409 ``no_interpreter``: the sandbox's template has no code interpreter; create it
    from the ``code-interpreter`` template to use :meth:`Sandbox.run_code`."""
    code = "no_interpreter"


def _subclasses(cls: Type[CordonError]):
    for sub in cls.__subclasses__():
        if sub.__module__ == __name__:
            yield sub
            yield from _subclasses(sub)


# Every class above, once (a class with two bases, CordonUnavailable, is reached twice).
_CLASSES = list(dict.fromkeys(_subclasses(CordonError)))
# The class of each code: those that name a code of their own (CordonUnavailable answers no
# code of the API: it is the SDK's, for a daemon that never answered).
_BY_CODE: Dict[str, Type[CordonError]] = {c.code: c for c in _CLASSES if "code" in vars(c)}

_BY_STATUS: Dict[int, Type[CordonError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 405: MethodNotAllowed,
    409: Conflict, 411: LengthRequired, 413: PayloadTooLarge, 429: QuotaExceeded,
    500: InternalError, 503: Unavailable, 504: Timeout, 507: InsufficientStorage,
}

__all__ = ["CordonError", *(c.__name__ for c in _CLASSES), "error_from_response"]


def error_from_response(status: int, body: bytes,
                        headers: Optional[Mapping[str, str]] = None) -> CordonError:
    """Build the typed exception for an error answer (status >= 400)."""
    code: Optional[str] = None
    message = ""
    try:
        doc = json.loads(body.decode("utf-8")) if body else None
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict):
            if isinstance(err.get("code"), str):
                code = err["code"]
            if isinstance(err.get("message"), str):
                message = err["message"]
    except (ValueError, UnicodeDecodeError):
        pass
    if code is None and not message and body:
        message = body[:500].decode("utf-8", "replace").strip()
    cls = _BY_CODE.get(code or "")
    if cls is None:
        cls = _BY_STATUS.get(status, CordonError)
        if status >= 500 and cls is CordonError:
            cls = InternalError
    if not code:
        code = cls.code if cls is not CordonError else f"http_{status}"
    retry_after: Optional[float] = None
    if headers is not None:
        ra = headers.get("Retry-After")
        if ra:
            try:
                retry_after = float(ra)
            except ValueError:
                retry_after = None
    return cls(code, message or f"HTTP {status}", status, retry_after)

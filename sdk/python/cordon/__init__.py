"""Python SDK for Cordon, the sandbox service for untrusted AI-generated code.

    from cordon import Sandbox
    with Sandbox.create(template="host", timeout=60) as sbx:
        print(sbx.exec("python3 -c 'print(6*7)'").stdout)

Standard library only. Talks to ``cordond`` over its unix socket (``$CORDON_SOCKET``,
default ``/run/cordon/cordon.sock``) or over TCP (``$CORDON_URL`` + ``$CORDON_API_KEY``).
"""

from ._http import DEFAULT_SOCKET, Client
from .errors import (AuditUnavailable, BadRequest, CapacityError, Conflict, CordonError,
                     CordonUnavailable, CrossDevice, Forbidden, InternalError, InvalidField,
                     InvalidPath, IsADirectory, LengthRequired, MethodNotAllowed, NoSpace,
                     NotADirectory, NotFound, PayloadTooLarge, QuotaExceeded, ReadOnly,
                     SandboxBusy, SandboxPaused, SnapshotLimit, StreamLagged, Timeout, Unauthorized,
                     Unavailable, UnknownField, UnsupportedRuntime, VolumeInUse, VolumeExists, InsufficientStorage,
                     UnsafeArchive, NoInterpreter, NotATerminal, PortUnreachable)
from .approvals import Approval, Approvals
from .code import CodeContext, Execution, ExecutionError, Logs, Result
from .files import Files, Watch
from .models import ExecResult, FileEntry, ProcessInfo, ProcessResult, SandboxInfo
from .processes import Process, Processes
from .pty import Pty, PtyProcess
from .sandbox import Sandbox
from .snapshots import Snapshot, Snapshots
from .templates import BuildFailed, Templates
from .volumes import Volumes

__version__ = "0.1.0"


def health(socket=None, url=None, api_key=None, timeout=5.0):
    """``GET /healthz``: the daemon's liveness, e.g. ``{"status": "ok"}``.

    Raises :class:`CordonUnavailable` when the daemon cannot be reached."""
    with Client(socket=socket, url=url, api_key=api_key, request_timeout=timeout) as c:
        return c.request("GET", "/healthz").json()


__all__ = [
    "Sandbox", "Snapshot", "Snapshots", "SandboxBusy", "SandboxPaused", "SnapshotLimit", "Templates", "BuildFailed", "SandboxInfo", "ExecResult", "Process", "ProcessResult", "ProcessInfo",
    "Processes", "Files", "FileEntry", "Watch", "Pty", "PtyProcess", "NotATerminal",
    "PortUnreachable", "Client", "DEFAULT_SOCKET", "health",
    "CordonError", "BadRequest", "InvalidField", "UnknownField", "UnsupportedRuntime", "PayloadTooLarge", "NotFound",
    "Conflict", "QuotaExceeded", "CapacityError", "Unauthorized", "Forbidden", "InternalError",
    "Unavailable", "CordonUnavailable", "Timeout", "MethodNotAllowed", "LengthRequired",
    "AuditUnavailable", "InvalidPath", "ReadOnly", "NoSpace", "NotADirectory", "IsADirectory",
    "CrossDevice", "StreamLagged", "Volumes", "VolumeInUse", "VolumeExists", "InsufficientStorage",
    "UnsafeArchive", "NoInterpreter", "Execution", "ExecutionError", "Logs", "Result",
    "CodeContext", "Approval", "Approvals", "__version__",
]

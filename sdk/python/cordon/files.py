"""``sbx.files``: file operations inside a sandbox."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, BinaryIO, List, Union

from . import errors
from .models import FileEntry

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

Data = Union[bytes, bytearray, memoryview, str, BinaryIO]


def _check_path(path: Union[str, "os.PathLike[str]"]) -> str:
    p = os.fspath(path)
    if not isinstance(p, str):
        raise TypeError("paths are str")
    if not p.startswith("/"):
        raise ValueError(f"paths inside a sandbox are absolute: {p!r}")
    return p


class Files:
    """File operations inside the sandbox; every path is absolute and resolved inside it.

    Files are written as the sandbox's ``user`` (uid 1000); its home is ``/home/user``.
    """

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    def _req(self, method: str, route: str, **kw: Any):
        sbx = self._sandbox
        return sbx._client.request(method, sbx._path(*route.split("/")), **kw)

    def write(self, path: str, data: Data) -> FileEntry:
        """Create or replace the file at ``path`` (its directory must exist) with ``data``
        (bytes, a str written as UTF-8, or a binary file object). Returns the new entry."""
        if hasattr(data, "read"):
            data = data.read()  # type: ignore[union-attr]
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data must be bytes, str or a binary file object")
        r = self._req("PUT", "files", query={"path": _check_path(path)}, body=bytes(data))
        doc = r.json()
        if isinstance(doc, dict) and "name" in doc:
            return FileEntry.from_json(doc)
        return self.stat(path)

    def read(self, path: str) -> bytes:
        """The bytes of the file at ``path``."""
        return self._req("GET", "files", query={"path": _check_path(path)}).body

    def read_text(self, path: str, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The file at ``path`` decoded as text."""
        return self.read(path).decode(encoding, errors)

    def list(self, path: str, depth: int = 1) -> List[FileEntry]:
        """The entries under directory ``path``, depth-first; ``depth`` 1 (default) lists
        only its own entries, up to 32. Symlinks are not followed."""
        doc = self._req("GET", "files/list",
                        query={"path": _check_path(path), "depth": int(depth)}).json() or {}
        return [FileEntry.from_json(e) for e in doc.get("entries", [])]

    def stat(self, path: str) -> FileEntry:
        """Metadata of ``path`` (a symlink itself, not its target)."""
        return FileEntry.from_json(
            self._req("GET", "files/stat", query={"path": _check_path(path)}).json())

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (a dangling symlink exists)."""
        try:
            self.stat(path)
            return True
        except errors.NotFound:
            return False

    def mkdir(self, path: str, parents: bool = False) -> FileEntry:
        """Create directory ``path``; ``parents=True`` is ``mkdir -p`` (no error if it exists)."""
        body = {"path": _check_path(path)}
        if parents:
            body["parents"] = True  # type: ignore[assignment]
        return FileEntry.from_json(self._req("POST", "files/mkdir", json_body=body).json())

    def move(self, src: str, dst: str) -> None:
        """Rename or move ``src`` to ``dst`` (rename(2) semantics)."""
        self._req("POST", "files/move", json_body={"from": _check_path(src), "to": _check_path(dst)})

    rename = move

    def remove(self, path: str) -> None:
        """Remove a file, or a directory with everything in it."""
        self._req("DELETE", "files", query={"path": _check_path(path)})

"""``sbx.files``: file operations inside a sandbox."""

from __future__ import annotations

import base64
import os
import urllib.parse
from typing import TYPE_CHECKING, Any, BinaryIO, Dict, Optional, Union

from . import errors
from .models import FileEntry

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

Data = Union[bytes, bytearray, memoryview, str, BinaryIO]
PathType = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_MAX_PAGES = 10000  # a listing followed to its end: 100 million entries at most


def _check_path(path: PathType) -> bytes:
    """The path as the bytes it names in the sandbox. A str is UTF-8; bytes (e.g. a
    :attr:`FileEntry.path_bytes` whose name is not UTF-8) are taken as they are."""
    p = os.fspath(path)
    if isinstance(p, str):
        p = p.encode("utf-8", "surrogateescape")
    if not isinstance(p, bytes):
        raise TypeError("paths are str or bytes")
    if not p.startswith(b"/"):
        raise errors.InvalidPath(
            "invalid_path", f"paths inside a sandbox are absolute: {p.decode('utf-8', 'replace')!r}")
    if b"\0" in p:
        raise errors.InvalidPath("invalid_path", "paths must not contain NUL bytes")
    return p


def _path_field(name: str, p: bytes) -> Dict[str, str]:
    """A path in a JSON body: ``name`` when it is UTF-8, else ``name_b64``, its exact bytes."""
    try:
        return {name: p.decode("utf-8")}
    except UnicodeDecodeError:
        return {name + "_b64": base64.b64encode(p).decode("ascii")}


def _query(path: bytes, **extra: Any) -> str:
    """?path= with the exact bytes percent-encoded (the daemon decodes them as they are)."""
    q = "?path=" + urllib.parse.quote_from_bytes(path, safe="/")
    for k, v in extra.items():
        if v is not None:
            q += f"&{k}=" + urllib.parse.quote(str(v), safe="")
    return q


class FileList(list):
    """The entries of :meth:`Files.list`, a list, with how the listing ended: ``truncated``
    is true when only part of the entries is here (one page was asked for, or the walk was cut
    at ``max_entries``) and ``next_cursor`` then continues it."""
    truncated: bool = False
    next_cursor: Optional[str] = None
    omitted: bool = False  # entries with a path over 4095 bytes below ``path`` were not listed


class Files:
    """File operations inside the sandbox; every path is absolute and resolved inside it.

    Files are written as the sandbox's ``user`` (uid 1000); its home is ``/home/user``.
    """

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    def _req(self, method: str, route: str, path: Optional[bytes] = None, **kw: Any):
        sbx = self._sandbox
        target = sbx._path(*route.split("/"))
        if path is not None:
            target += _query(path, **kw.pop("params", {}))
        return sbx._client.request(method, target, **kw)

    def write(self, path: PathType, data: Data) -> FileEntry:
        """Create or replace the file at ``path`` (its directory must exist) with ``data``
        (bytes, a str written as UTF-8, or a binary file object). Returns the new entry."""
        p = _check_path(path)
        if hasattr(data, "read"):
            data = data.read()  # type: ignore[union-attr]
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data must be bytes, str or a binary file object")
        r = self._req("PUT", "files", p, body=bytes(data))
        doc = r.json()
        if isinstance(doc, dict) and "name" in doc:
            return FileEntry.from_json(doc)
        return self.stat(p)

    def read(self, path: PathType) -> bytes:
        """The bytes of the file at ``path``."""
        return self._req("GET", "files", _check_path(path)).body

    def read_text(self, path: PathType, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The file at ``path`` decoded as text."""
        return self.read(path).decode(encoding, errors)

    def list(self, path: PathType, depth: int = 1, *, cursor: Optional[str] = None,
             pages: Optional[int] = None) -> FileList:
        """The entries under directory ``path``, depth-first; ``depth`` 1 (default) lists
        only its own entries, up to 32. Symlinks are not followed.

        The daemon answers at most 10,000 entries (about 1 MiB) at a time; by default this
        follows every page to the end. ``pages=N`` stops after N pages; the result's
        ``truncated`` then says whether there is more and ``next_cursor`` (pass it back as
        ``cursor=``) where it goes on. Entries made or removed while paging may be missed or
        repeated. An entry whose name is not UTF-8 has ``name_b64``/``path_b64`` set, and its
        :attr:`FileEntry.path_bytes` works with every method here that takes a path."""
        p = _check_path(path)
        out = FileList()
        for _ in range(pages if pages is not None else _MAX_PAGES):
            doc = self._req("GET", "files/list", p,
                            params={"depth": int(depth), "cursor": cursor}).json() or {}
            out.extend(FileEntry.from_json(e) for e in doc.get("entries", []))
            out.omitted = out.omitted or bool(doc.get("omitted"))
            cursor = doc.get("next_cursor") if doc.get("truncated") else None
            if not cursor:
                break
        out.truncated = cursor is not None
        out.next_cursor = cursor
        return out

    def stat(self, path: PathType) -> FileEntry:
        """Metadata of ``path`` (a symlink itself, not its target)."""
        return FileEntry.from_json(self._req("GET", "files/stat", _check_path(path)).json())

    def exists(self, path: PathType) -> bool:
        """Whether ``path`` exists (a dangling symlink exists)."""
        try:
            self.stat(path)
            return True
        except errors.NotFound:
            return False

    def mkdir(self, path: PathType, parents: bool = False) -> FileEntry:
        """Create directory ``path``; ``parents=True`` is ``mkdir -p`` (no error if it exists)."""
        body: Dict[str, Any] = _path_field("path", _check_path(path))
        if parents:
            body["parents"] = True  # type: ignore[assignment]
        return FileEntry.from_json(self._req("POST", "files/mkdir", json_body=body).json())

    def move(self, src: PathType, dst: PathType) -> None:
        """Rename or move ``src`` to ``dst`` (rename(2) semantics; :class:`CrossDevice`
        between two file systems)."""
        body = {**_path_field("from", _check_path(src)), **_path_field("to", _check_path(dst))}
        self._req("POST", "files/move", json_body=body)

    rename = move

    def remove(self, path: PathType) -> None:
        """Remove a file, or a directory with everything in it."""
        self._req("DELETE", "files", _check_path(path))

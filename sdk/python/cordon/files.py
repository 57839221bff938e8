"""``sbx.files``: file operations inside a sandbox."""

from __future__ import annotations

import base64
import json
import io
import os
import stat as stat_mod
import tarfile
import urllib.parse
from typing import TYPE_CHECKING, Any, BinaryIO, Dict, Iterator, List, Optional, Union

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


_MAX_UNPACKED = 64 << 30  # file data download_dir() unpacks at most, by default
_MAX_MEMBERS = 1 << 20


def _unsafe(why: str, name: str = "") -> errors.UnsafeArchive:
    shown = name.encode("utf-8", "replace")[:100].decode("utf-8", "replace")
    return errors.UnsafeArchive("unsafe_archive", f"{why} ({shown!r})" if name else why, 400)


def _norm(name: str) -> str:
    while name.startswith("./"):
        name = name[2:].lstrip("/")
    return "" if name in (".", "") else name.rstrip("/")


def _name_safe(name: str) -> bool:
    return bool(name) and not name.startswith("/") and all(
        c not in ("", ".", "..") for c in name.split("/"))


def _link_safe(name: str, target: str) -> bool:
    """A symlink at ``name`` pointing at ``target`` stays inside the tree (tar.h's rule)."""
    if not target or target.startswith("/"):
        return False
    depth = name.count("/")
    for c in target.split("/"):
        if c == "..":
            depth -= 1
            if depth < 0:
                return False
        elif c not in ("", "."):
            depth += 1
    return True


def _check_members(tar: tarfile.TarFile, max_bytes: int) -> List[tarfile.TarInfo]:
    """The members to unpack, each checked as cordond checks them; raises UnsafeArchive."""
    out, total = [], 0
    for m in tar:
        name = _norm(m.name)
        if not name:
            if not m.isdir():
                raise _unsafe("the root is not a directory")
            continue
        if not _name_safe(name):
            raise _unsafe("an absolute name or '..'", m.name)
        if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise _unsafe("a device, fifo or other special entry", m.name)
        # An absolute target names a path of the sandbox: kept as it is, never followed.
        if m.issym() and not (m.linkname.startswith("/") or _link_safe(name, m.linkname)):
            raise _unsafe("a symlink out of the tree", m.name)
        if m.islnk() and not _name_safe(_norm(m.linkname)):
            raise _unsafe("a hard link out of the tree", m.name)
        total += m.size if m.isreg() else 0
        if total > max_bytes or len(out) >= _MAX_MEMBERS:
            raise errors.PayloadTooLarge("payload_too_large", "the archive is too large", 413)
        m.name = name
        out.append(m)
    return out


def _parent_fd(root: int, name: str, create: bool) -> "tuple[int, str]":
    """The directory holding ``name`` under ``root``, through no symlink (made if missing)."""
    parts = name.split("/")
    fd = os.dup(root)
    try:
        for c in parts[:-1]:
            if create:
                try:
                    os.mkdir(c, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nfd = os.open(c, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _clear(dfd: int, last: str) -> bool:
    """Removes what is at ``last`` unless it is a directory (then True)."""
    try:
        st = os.stat(last, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat_mod.S_ISDIR(st.st_mode):
        return True
    os.unlink(last, dir_fd=dfd)
    return False


def _extract(tar: tarfile.TarFile, m: tarfile.TarInfo, root: int) -> None:
    dfd, last = _parent_fd(root, m.name, True)
    try:
        is_dir = _clear(dfd, last)
        if m.isdir():
            if not is_dir:
                os.mkdir(last, (m.mode & 0o777) | 0o700, dir_fd=dfd)
        elif is_dir:
            raise errors.IsADirectory("is_a_directory", f"{m.name!r} is a directory here", 409)
        elif m.issym():
            os.symlink(m.linkname, last, dir_fd=dfd)
        elif m.islnk():
            tfd, tlast = _parent_fd(root, _norm(m.linkname), False)
            try:
                os.link(tlast, last, src_dir_fd=tfd, dst_dir_fd=dfd, follow_symlinks=False)
            finally:
                os.close(tfd)
        else:
            fd = os.open(last, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         m.mode & 0o777, dir_fd=dfd)
            with os.fdopen(fd, "wb") as out, tar.extractfile(m) as src:  # type: ignore[union-attr]
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
    finally:
        os.close(dfd)



def _pack(local: PathType) -> bytes:
    """The contents of host directory ``local`` as a tar: files, directories and symlinks
    (as links); sockets, fifos and devices are left out."""
    top = os.fspath(local)
    if not os.path.isdir(top):
        raise NotADirectoryError(f"{top!r} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for n in sorted(dirnames) + sorted(filenames):
                p = os.path.join(dirpath, n)
                st = os.lstat(p)
                if stat_mod.S_ISDIR(st.st_mode) or stat_mod.S_ISREG(st.st_mode) or \
                        stat_mod.S_ISLNK(st.st_mode):
                    tar.add(p, arcname=os.path.relpath(p, top), recursive=False)
    return buf.getvalue()


class FileList(list):
    """The entries of :meth:`Files.list`, a list, with how the listing ended: ``truncated``
    is true when only part of the entries is here (one page was asked for, or the walk was cut
    at ``max_entries``) and ``next_cursor`` then continues it."""
    truncated: bool = False
    next_cursor: Optional[str] = None
    omitted: bool = False  # entries with a path over 4095 bytes below ``path`` were not listed


class Watch:
    """An open directory watch (:meth:`Files.watch`): iterate for events, then close."""

    def __init__(self, stream: Any):
        self._stream = stream

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for line in self._stream.lines():
            try:
                yield json.loads(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                continue

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


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

    def watch(self, path: PathType, recursive: bool = False) -> "Watch":
        """Watch the directory ``path`` (and, with ``recursive``, every directory beneath it,
        new ones too): iterate the returned :class:`Watch` for event dicts ``{"type":
        "create"|"write"|"remove"|"rename"|"chmod"|"overflow", "path": ...}`` as they happen;
        ``overflow`` says events were lost (a reader too slow, or a flood). Close it (or use it
        as a context manager) to stop."""
        sbx = self._sandbox
        target = sbx._path("files", "watch") + _query(_check_path(path),
                                                      recursive="1" if recursive else None)
        return Watch(sbx._client.stream("GET", target))

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

    def upload_dir(self, local: PathType, path: PathType) -> Dict[str, Any]:
        """Copies the contents of host directory ``local`` into ``path`` in the sandbox (made
        if missing), as one tar unpacked inside the sandbox. Symlinks are sent as links and
        must stay inside the tree (:class:`UnsafeArchive` otherwise). Returns ``{"entries",
        "bytes"}``."""
        r = self._req("PUT", "files/archive", _check_path(path), body=_pack(local))
        return r.json()

    def download_dir(self, path: PathType, local: PathType,
                     max_bytes: int = _MAX_UNPACKED) -> int:
        """Copies the contents of ``path`` in the sandbox into host directory ``local`` (made
        if missing); returns the number of entries. What comes out of a sandbox is hostile:
        each entry is checked first (no absolute name, no ``..``, no link that climbs out of
        the tree, no device: :class:`UnsafeArchive`, and nothing is written), then written
        through no symlink of ``local``. A symlink with an absolute target (a venv's
        ``bin/python``) is written as it is: it points at the host's path of that name."""
        body = self._req("GET", "files/archive", _check_path(path)).body
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
            members = _check_members(tar, max_bytes)
            os.makedirs(os.fspath(local), exist_ok=True)
            root = os.open(os.fspath(local), os.O_RDONLY | os.O_DIRECTORY)
            try:
                for m in members:
                    _extract(tar, m, root)
            finally:
                os.close(root)
        return len(members)

    def remove(self, path: PathType) -> None:
        """Remove a file, or a directory with everything in it."""
        self._req("DELETE", "files", _check_path(path))

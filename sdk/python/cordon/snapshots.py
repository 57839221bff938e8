"""Snapshots of sandboxes (``POST /v1/sandboxes/{id}/snapshots``, ``/v1/snapshots``).

    snap = sbx.snapshot()                       # the filesystem (memory: False on jail)
    child = Sandbox.create(snapshot=snap.id)    # its template and limits unless given
    kids = sbx.fork(3)                          # one snapshot, three children
    Snapshots.delete(snap.id)

A child starts from the snapshot's files; it does not inherit the parent's processes or
memory (``memory`` is False on the jail), its open connections, streams, env or network
policy; it has its own id, hostname, address, uid range and audit log.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._http import Client, quote_segment


@dataclass
class Snapshot:
    id: str
    sandbox: str = ""
    template: str = ""
    runtime: str = ""
    memory: bool = False
    size_bytes: int = 0
    created_at: str = ""
    limits: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "Snapshot":
        known = {k: doc[k] for k in cls.__dataclass_fields__ if k in doc}
        return cls(**known)


def _c(client: Optional[Client], **kw: Any) -> Client:
    return client if client is not None else Client(**kw)


class Snapshots:
    """The snapshots a caller made: list, get, delete."""

    @staticmethod
    def list(*, client: Optional[Client] = None, **kw: Any) -> List[Snapshot]:
        doc = _c(client, **kw).request("GET", "/v1/snapshots").json() or {}
        return [Snapshot.from_json(s) for s in doc.get("snapshots", [])]

    @staticmethod
    def get(snapshot_id: str, *, client: Optional[Client] = None, **kw: Any) -> Snapshot:
        path = "/v1/snapshots/" + quote_segment(snapshot_id)
        return Snapshot.from_json(_c(client, **kw).request("GET", path).json())

    @staticmethod
    def delete(snapshot_id: str, *, client: Optional[Client] = None, **kw: Any) -> None:
        _c(client, **kw).request("DELETE", "/v1/snapshots/" + quote_segment(snapshot_id))

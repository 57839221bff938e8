"""Persistent volumes of cordond: named disks that outlive sandboxes and daemon restarts.

    from cordon import Sandbox, Volumes
    vols = Volumes()                                  # $CORDON_SOCKET (unix socket only)
    vols.create("data", size_mb=1024)                 # its size is its quota
    with Sandbox.create(volumes=["data:/data"]) as sbx:
        sbx.exec("echo kept > /data/f")
    with Sandbox.create(volumes=[{"name": "data", "path": "/data", "read_only": True}]) as sbx:
        print(sbx.files.read("/data/f"))
    vols.delete("data")                               # VolumeInUse while mounted

A volume is mounted read-write by one sandbox at a time and read-only by any number.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._http import Client, quote_segment
from .sandbox import _client


class Volumes:
    """The volumes of one cordond (``/v1/volumes``)."""

    def __init__(self, client: Optional[Client] = None, *, socket: Optional[str] = None,
                 url: Optional[str] = None, api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None):
        self._client = _client(client, socket, url, api_key, request_timeout)

    def create(self, name: str, size_mb: int) -> Dict[str, Any]:
        """Makes volume ``name`` of ``size_mb`` MiB (a sparse image: it costs what is
        written). :class:`VolumeExists`, :class:`InsufficientStorage` (more than the host's
        free space), :class:`InvalidField` (a name not ``[a-z0-9][a-z0-9._-]{0,62}``)."""
        return self._client.request("POST", "/v1/volumes",
                                    json_body={"name": name, "size_mb": size_mb}).json()

    def list(self) -> List[Dict[str, Any]]:
        """Every volume: name, size_mb, used_mb, created_s, in_use, attachments."""
        return (self._client.request("GET", "/v1/volumes").json() or {}).get("volumes", [])

    def get(self, name: str) -> Dict[str, Any]:
        """One volume and the sandboxes it is mounted in; :class:`NotFound` if none."""
        return self._client.request("GET", f"/v1/volumes/{quote_segment(name)}").json()

    def delete(self, name: str) -> None:
        """Deletes the volume and its data; :class:`VolumeInUse` while it is mounted."""
        self._client.request("DELETE", f"/v1/volumes/{quote_segment(name)}")

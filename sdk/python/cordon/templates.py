"""Templates of cordond: list, inspect, build from a recipe (events streamed), delete.

    from cordon import Templates
    t = Templates()                                   # $CORDON_SOCKET or $CORDON_URL
    meta = t.build("web", "FROM python\\nRUN pip install --no-index ./wheels || true\\n",
                   on_event=lambda ev: print(ev.get("data", ""), end=""))
    with Sandbox.create(template="web") as sbx: ...
"""

from __future__ import annotations

import base64
import io
import os
import tarfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from . import errors
from ._http import Client, quote_segment
from .sandbox import _client


class BuildFailed(errors.CordonError):
    """A template build that ran and failed (a step exited non-zero, a bad recipe line).

    ``message`` is the builder's own ("line 3: RUN: exited with status 2"); ``events`` the
    events the build streamed, its output included."""

    def __init__(self, message: str, events: List[Dict[str, Any]]):
        super().__init__("build_failed", message, None)
        self.events = events


def _context_archive(directory: Union[str, "os.PathLike[str]"]) -> str:
    """The directory's contents as a base64 gzipped tar (names relative to it)."""
    if not os.path.isdir(directory):
        raise ValueError(f"context: {directory!r} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for entry in sorted(os.listdir(directory)):
            tar.add(os.path.join(directory, entry), arcname=entry)
    return base64.b64encode(buf.getvalue()).decode("ascii")


class Templates:
    """The templates of one cordond (``/v1/templates``)."""

    def __init__(self, client: Optional[Client] = None, *, socket: Optional[str] = None,
                 url: Optional[str] = None, api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None):
        self._client = _client(client, socket, url, api_key, request_timeout)

    def list(self) -> List[Dict[str, Any]]:
        """Every template's ``template.json`` (name, size_bytes, env, start, ready, ...)."""
        return self._client.request("GET", "/v1/templates").json()

    def get(self, name: str) -> Dict[str, Any]:
        """One template's ``template.json``; :class:`NotFound` when there is none."""
        return self._client.request("GET", f"/v1/templates/{quote_segment(name)}").json()

    def delete(self, name: str) -> None:
        """Removes a template (sandboxes running from it keep their tree)."""
        self._client.request("DELETE", f"/v1/templates/{quote_segment(name)}")

    def build(self, name: str, recipe: str, build_args: Optional[Mapping[str, str]] = None,
              no_cache: bool = False,
              on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
              context: Optional[Union[str, "os.PathLike[str]"]] = None) -> Dict[str, Any]:
        """Builds (or rebuilds) template ``name`` from the recipe text and returns its
        ``template.json``. ``context`` is a directory whose files COPY can read (sent as a
        gzipped tar, at most 32 MiB; symlinks are sent as links). Every event of the build
        (``step``, ``log``, ``step_done``, ``done``) is passed to ``on_event`` as it arrives.
        Raises :class:`BuildFailed` when the build fails; the daemon's own refusals (a bad
        name, too many builds at once) are raised as the usual :class:`CordonError`
        subclasses."""
        body: Dict[str, Any] = {"name": name, "recipe": recipe}
        if context is not None:
            body["context"] = _context_archive(context)
        if build_args:
            body["build_args"] = dict(build_args)
        if no_cache:
            body["no_cache"] = True
        events: List[Dict[str, Any]] = []
        status = None
        message = ""
        with self._client.stream("POST", "/v1/templates", json_body=body) as s:
            for ev in s.json_lines():
                events.append(ev)
                if ev.get("event") == "error":
                    message = ev.get("message", "")
                if ev.get("event") == "exit":
                    status = ev.get("status")
                if on_event is not None:
                    on_event(ev)
        if status != 0:
            raise BuildFailed(message or f"the build ended with status {status}", events)
        return self.get(name)

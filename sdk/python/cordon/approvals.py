"""Approval gates: requests the egress proxy holds for a person's decision.

A sandbox whose network has an approve rule (``{"approve": "api.stripe.com", "methods":
["POST"], "paths": ["/v1/charges"], "timeout_s": 300}``) gets a slow answer, not an error,
for a matching request while it waits; allowed, the request goes on as it was sent; denied or
timed out, the sandbox gets a 403 saying it was denied by policy.

    from cordon import Approvals, Sandbox
    def review(ap):                                  # on a thread of the SDK's
        return ap.method == "POST" and ap.path.startswith("/v1/charges")   # True: allow
    sbx = Sandbox.create(network={"policy": "allow", "approve": [...]}, on_approval=review)

    aps = Approvals()                                # or by hand, from anywhere
    for ap in aps.list():
        aps.deny(ap.id, reason="not today")
"""

from __future__ import annotations

import http.client
import logging
import threading
from typing import Any, Callable, Dict, List, Optional

from . import errors
from ._http import Client, quote_segment

log = logging.getLogger("cordon")


class Approval:
    """One held request: ``id``, ``sandbox``, ``method``, ``host``, ``port``, ``path``,
    ``preview`` (headers and the start of the body, secrets redacted), ``timeout_s`` and, in
    a list, ``age_s``."""

    def __init__(self, doc: Dict[str, Any], approvals: "Approvals"):
        self.raw = doc
        self._approvals = approvals
        for k in ("id", "sandbox", "method", "host", "port", "path", "preview", "timeout_s", "age_s", "rule"):
            setattr(self, k, doc.get(k))

    def allow(self, reason: Optional[str] = None) -> Dict[str, Any]:
        return self._approvals.allow(self.id, reason)

    def deny(self, reason: Optional[str] = None) -> Dict[str, Any]:
        return self._approvals.deny(self.id, reason)

    def __repr__(self) -> str:
        return f"<cordon.Approval {self.id} {self.method} {self.host}{self.path}>"


class Approvals:
    """The pending approvals of one cordond (``/v1/approvals``); a TCP client sees those of
    its own sandboxes."""

    def __init__(self, client: Optional[Client] = None, *, socket: Optional[str] = None,
                 url: Optional[str] = None, api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None):
        from .sandbox import _client
        self._client = _client(client, socket, url, api_key, request_timeout)

    def list(self, sandbox: Optional[str] = None) -> List[Approval]:
        """Oldest first; ``sandbox``: that sandbox's only."""
        doc = self._client.request("GET", "/v1/approvals",
                                   query=[("sandbox", sandbox)] if sandbox else None).json() or {}
        return [Approval(a, self) for a in doc.get("approvals", [])]

    def _decide(self, approval_id: str, decision: str, reason: Optional[str]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"decision": decision}
        if reason is not None:
            body["reason"] = reason
        return self._client.request("POST", "/v1/approvals/" + quote_segment(approval_id),
                                    json_body=body).json()

    def allow(self, approval_id: str, reason: Optional[str] = None) -> Dict[str, Any]:
        """The request goes on. :class:`NotFound` once it is decided, timed out or gone."""
        return self._decide(approval_id, "allow", reason)

    def deny(self, approval_id: str, reason: Optional[str] = None) -> Dict[str, Any]:
        """The sandbox gets a 403 naming ``reason``."""
        return self._decide(approval_id, "deny", reason)


class ApprovalWatcher(threading.Thread):
    """Follows ``/v1/events`` for one sandbox's ``approval.pending`` and hands each to
    ``callback(approval)``: True allows, False denies, None leaves it to someone else (or the
    timeout). Ends when the sandbox is destroyed or :meth:`stop` is called."""

    def __init__(self, client: Client, sandbox_id: str, callback: Callable[[Approval], Optional[bool]]):
        super().__init__(name=f"cordon-approvals-{sandbox_id}", daemon=True)
        self._approvals = Approvals(client)
        self._client = client
        self._sandbox = sandbox_id
        self._callback = callback
        self._stream = None
        self._stopped = False
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            self._stream = self._client.stream(
                "GET", "/v1/events", query=[("follow", "1"), ("sandbox", self._sandbox),
                                            ("kind", "approval.pending,sandbox.destroyed")])
        except errors.CordonError:
            log.warning("cordon: cannot follow the approvals of %s", self._sandbox, exc_info=True)
            return
        finally:
            self.ready.set()
        try:
            for ev in self._stream.json_lines():
                if ev.get("kind") == "sandbox.destroyed" or self._stopped:
                    return
                if ev.get("kind") == "approval.pending":
                    self._one(Approval(ev, self._approvals))
        except (OSError, ValueError, http.client.HTTPException, AttributeError):
            if not self._stopped:
                log.warning("cordon: the approvals stream of %s ended", self._sandbox, exc_info=True)
        finally:
            self._stream.close()

    def _one(self, ap: Approval) -> None:
        try:
            verdict = self._callback(ap)
            if verdict is True:
                ap.allow()
            elif verdict is False:
                ap.deny()
        except errors.NotFound:
            pass  # decided already (a replayed event), timed out, or gone
        except Exception:  # noqa: BLE001 - a callback's failure must not end the watcher
            log.exception("cordon: on_approval failed for %s", ap.id)

    def stop(self) -> None:
        self._stopped = True
        if self._stream is not None:
            try:
                self._stream.close()
            except OSError:
                pass

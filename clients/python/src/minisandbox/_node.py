"""One node of a pool: its client, its health, what the pool knows of its capacity and store.

A node's requests go through ``NodeTransport``: a failure to reach the node is checked with a
health probe on a fresh connection (within ``node_timeout``); a node that does not answer it is
down and every call on it raises ``NodeLost`` until a probe finds it back. The pool's monitor
(pool.py) marks a node down when it stops answering while calls are in flight, and breaks those
calls' connections, so that they raise ``NodeLost`` then rather than at their socket timeout.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Optional, Tuple

from ._transport import Response, Transport
from .client import Client
from .errors import CapacityError, MinisandboxError, NodeLost, NotConfiguredError, NotFoundError, TransportError, node_of

def _sandbox_in(path: str) -> Optional[str]:
    """The sandbox id a request path is about (``/v1/sandboxes/<id>/...``), else None."""
    parts = path.split("/")
    if len(parts) >= 4 and parts[1] == "v1" and parts[2] == "sandboxes" and parts[3]:
        return urllib.parse.unquote(parts[3])
    return None


class Health:
    """What a node's ``GET /v1/health`` said."""

    def __init__(self, body: Dict[str, Any]) -> None:
        node = body.get("node")
        self.name: Optional[str] = node if isinstance(node, str) and node else None
        started = body.get("started_at")
        self.started_at: Optional[str] = started if isinstance(started, str) else None
        self.ready = body.get("ready") is not False
        self.raw = body


class Node:
    """A ``serve`` node as its pool sees it. ``up`` is False from the moment the node failed to
    answer until a probe finds it back; ``reason`` says why it went down."""

    def __init__(self, url: str, *, token: Optional[str], timeout: float, node_timeout: float, on_gone: Callable[[str], None],
                 on_made: Callable[["Node", str], None]) -> None:
        self.url = url.rstrip("/")
        self.node_timeout = node_timeout
        self.name: Optional[str] = None
        self.started_at: Optional[str] = None
        self.up = False
        self.ready = True
        self.reason = "not probed yet"
        self.down_since: Optional[float] = None
        self.misses = 0
        self.last_probe = 0.0
        # None: not asked yet; False: the node has no /v1/holds (an older server): it counts as cold
        self.holds_route: Optional[bool] = None
        self._lock = threading.Lock()
        self._check_lock = threading.Lock()
        # the last probe: when it started, what it found (None: no answer)
        self._checked: Optional[Tuple[float, Optional[Health]]] = None
        # capacity as last answered, less the creates placed here since (and plus the deletes)
        self._cap: Optional[Dict[str, int]] = None
        self._cap_at = 0.0
        # health probes: a connection of their own each time (nothing idle kept), so a probe never
        # waits behind a call, and within node_timeout for the connect and the answer
        self.probe = Transport(self.url, token, None, node_timeout, 0.0, max_idle_connections=0, connect_timeout=node_timeout)
        self.client = NodeClient(self, token=token, timeout=timeout, on_gone=on_gone, on_made=on_made)

    @property
    def label(self) -> str:
        return self.name or self.url

    def __repr__(self) -> str:
        return f"Node({self.label!r}, up={self.up})"

    # -- health ---------------------------------------------------------------------------------

    def probe_health(self, timeout: Optional[float] = None) -> Optional[Health]:
        """One health probe on a fresh connection: what the node said, or None if it did not answer."""
        try:
            r = self.probe.request("GET", "/v1/health", timeout=timeout or self.node_timeout, retry_capacity=False)
            body = r.json()
            return Health(body if isinstance(body, dict) else {})
        except MinisandboxError as e:
            # a node that answers with an error is up (a 401 says the token is wrong, not the node gone)
            if isinstance(e, TransportError):
                return None
            return Health({})

    def record(self, h: Optional[Health], reason: str = "unreachable", started: Optional[float] = None) -> None:
        """Takes a probe's outcome (of a probe begun at ``started``): up with its name and start
        time, or down (from now) for ``reason``."""
        with self._lock:
            self.last_probe = time.monotonic()
            self._checked = (started if started is not None else self.last_probe, h)
            if h is None:
                if self.up or self.down_since is None:
                    self.down_since = time.monotonic()
                self.up, self.reason = False, reason
                self._cap = None
                return
            if h.name is not None:
                self.name = h.name
            if h.started_at is not None and self.started_at is not None and h.started_at != self.started_at:
                self._cap = None  # a restarted node: what was counted is gone with its sandboxes
            if h.started_at is not None:
                self.started_at = h.started_at
            self.up, self.ready, self.misses, self.down_since, self.reason = True, h.ready, 0, None, "up"

    def mark_down(self, reason: str) -> None:
        self.record(None, reason)

    def check(self, since: float) -> bool:
        """Whether the node answers now, for a call that started at ``since`` and failed: a probe on
        a fresh connection; or, where one made since then found the node gone, that one (a hundred
        calls failing at once on a node that died probe it once, not a hundred times). A probe that
        found it up before this call failed vouches for nothing."""
        with self._check_lock:
            c = self._checked
            if c is not None and c[0] >= since and c[1] is None:
                return False
            t = time.monotonic()
            h = self.probe_health()
            self.record(h, started=t)
            return h is not None

    def lost(self, sandbox_id: Optional[str], cause: Optional[BaseException] = None) -> NodeLost:
        what = f"sandbox {sandbox_id} is lost: " if sandbox_id else ""
        why = {
            "unresponsive": "it stopped answering health probes while calls were in flight",
            "restarted": "it restarted",
        }.get(self.reason, "it refused or dropped the connection and did not answer a health probe")
        e = NodeLost(
            f"{what}node {self.label} ({self.url}) is lost: {why}",
            node=self.name or node_of(sandbox_id or "") or self.url,
            sandbox_id=sandbox_id,
            reason=self.reason if self.reason in ("unresponsive", "restarted") else "unreachable",
            hint="its sandboxes' work is gone: drop these episodes (do not score them) and start them again on the pool",
        )
        e.__cause__ = cause
        return e

    # -- capacity -------------------------------------------------------------------------------

    def capacity(self, max_age: float) -> Dict[str, int]:
        """``{free, live, max}``: the node's answer if younger than ``max_age`` seconds (with the
        pool's own creates and deletes since counted in), else a fresh one. Raises NodeLost."""
        with self._lock:
            if self._cap is not None and time.monotonic() - self._cap_at < max_age:
                return dict(self._cap)
        body = self.client.transport.request("GET", "/v1/capacity", timeout=self.node_timeout, retry_capacity=False).json()
        live, mx = int(body.get("live", 0)), int(body.get("max", 0))
        free = int(body["free"]) if isinstance(body.get("free"), int) else max(0, mx - live)
        name = body.get("node")
        with self._lock:
            if isinstance(name, str) and name:
                self.name = name
            self._cap = {"free": free, "live": live, "max": mx}
            self._cap_at = time.monotonic()
            return dict(self._cap)

    def count(self, delta: int) -> None:
        """A create placed here (-1 free) or a sandbox deleted here (+1), until the next answer."""
        with self._lock:
            if self._cap is not None:
                self._cap["free"] = max(0, min(self._cap["max"], self._cap["free"] + delta))
                self._cap["live"] = max(0, self._cap["live"] - delta)

    def full(self) -> None:
        """The node answered 429: no free slot until it says otherwise."""
        with self._lock:
            if self._cap is not None:
                self._cap["free"] = 0
            else:
                self._cap, self._cap_at = {"free": 0, "live": 0, "max": 0}, time.monotonic()

    # -- holds ----------------------------------------------------------------------------------

    def holds(self, body: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The node's ``POST /v1/holds`` answer's one entry for ``body``, or None where the node
        cannot say (an older server, or one without a store): such a node counts as cold."""
        if self.holds_route is False:
            return None
        try:
            r = self.client.transport.request("POST", "/v1/holds", json_body=body, timeout=self.node_timeout, retry_capacity=False)
        except NotFoundError as e:
            if e.missing_route:
                self.holds_route = False
                return None
            raise
        except NotConfiguredError:
            self.holds_route = False
            return None
        self.holds_route = True
        holds = (r.json() or {}).get("holds") or []
        return holds[0] if holds and isinstance(holds[0], dict) else None


class NodeTransport(Transport):
    """A node's transport: a failure to reach the node is checked with a health probe on a fresh
    connection. A node that does not answer it is lost (NodeLost); one that answers gets the
    request once more if it never reached it (no connection was made), else the failure is the
    request's own (e.g. a command that outlived its timeout) and is raised as it was."""

    def __init__(self, node: Node, token: Optional[str], timeout: float) -> None:
        super().__init__(node.url, token, None, timeout, 0.0, connect_timeout=node.node_timeout)
        self.node = node

    def request(self, method: str, path: str, **kwargs: Any) -> Response:
        node = self.node
        sid = _sandbox_in(path)
        if not node.up and node.down_since is not None:
            raise node.lost(sid)
        t0 = time.monotonic()
        try:
            return super().request(method, path, **kwargs)
        except NodeLost as e:  # 410 NODE_RESTARTED: the node is back, the sandbox is not
            e.sandbox_id = e.sandbox_id or sid
            e.node = e.node or node.name
            raise
        except CapacityError:
            raise
        except TransportError as e:
            if not node.up and node.down_since is not None:
                raise node.lost(sid, e) from e  # the monitor broke this call: its node stopped answering
            if not node.check(t0):
                raise node.lost(sid, e) from e
            if e.sent:
                raise
        t0 = time.monotonic()
        try:
            return super().request(method, path, **kwargs)
        except TransportError as e:
            if isinstance(e, NodeLost) or node.check(t0):
                raise
            raise node.lost(sid, e) from e


class NodeClient(Client):
    """A ``Client`` of one node of a pool: the handles it makes are the usual ``RemoteSandbox``,
    ``Session`` and ``Job``, bound to it; the pool learns of the sandboxes it makes and deletes."""

    def __init__(self, node: Node, *, token: Optional[str], timeout: float, on_gone: Callable[[str], None],
                 on_made: Callable[[Node, str], None]) -> None:
        super().__init__(node.url, token=token, timeout=timeout)
        self._t.close()
        self._t = NodeTransport(node, token, timeout)  # the node's, with its loss checks
        self.node = node
        self._on_gone = on_gone
        self._on_made = on_made

    def _made(self, sandbox_id: str) -> None:
        self._on_made(self.node, sandbox_id)

    def _gone(self, sandbox_id: str) -> None:
        self._on_gone(sandbox_id)

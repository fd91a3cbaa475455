"""``Pool``: one client over many ``serve`` nodes.

    pool = Pool(["http://n1:7000", "http://n2:7000"])     # a static list
    pool = Pool(dns="minisandbox.ns.svc:7000")            # a name whose A/AAAA records are the nodes
    with pool.create("swe/astropy-12907") as sb:           # placed; the handle stays on its node
        sb.exec("pytest -q")

A create goes to a node that already holds the environment (``POST /v1/holds``: laid out, or the
most of its layers) and has a free slot (``GET /v1/capacity``), else to the least loaded; a 429 or
an unreachable node moves it to the next node, ``max_attempts`` nodes at most. Every handle is the
usual ``RemoteSandbox`` bound to its node's client (the id ends in ``.<node>``), so code written for
``Client`` runs on a pool. A node that dies is a clear event: calls on its sandboxes raise
``NodeLost`` within a bounded time (a refused or dropped connection with no answer to a health
probe, ``node_timeout``; or, for a call in flight on a node that stops answering, the monitor's
``monitor_misses`` probes ``monitor_interval`` apart); the pool places nothing there and probes it
back in every ``probe_interval``.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union

from ._node import Node, NodeClient
from ._transport import resolve_token
from .client import RemoteSandbox
from .errors import CapacityError, MinisandboxError, NodeLost, NotConfiguredError, NotFoundError, TransportError, node_of
from .types import Evaluation, Limits, SandboxInfo

T = TypeVar("T")

HoldKey = Dict[str, Any]


def _urls_from_env() -> Tuple[Optional[List[str]], Optional[str]]:
    """$MINISANDBOX_POOL: ``dns:<name>:<port>``, or URLs separated by commas; else $MINISANDBOX_URL."""
    spec = os.environ.get("MINISANDBOX_POOL", "").strip()
    if spec.startswith("dns:"):
        return None, spec[4:]
    if spec:
        return [u.strip() for u in spec.split(",") if u.strip()], None
    one = os.environ.get("MINISANDBOX_URL")
    return ([one] if one else None), None


def _split_dns(dns: str) -> Tuple[str, str, int]:
    """``name:port`` or ``http(s)://name:port`` -> (scheme, name, port)."""
    u = urllib.parse.urlsplit(dns if "://" in dns else f"http://{dns}")
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"dns must be name:port or http(s)://name:port, got {dns!r}")
    return u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 7000)


def resolve_nodes(dns: str) -> List[str]:
    """The node URLs a name's A/AAAA records give (in the resolver's order, each address once)."""
    scheme, host, port = _split_dns(dns)
    out: List[str] = []
    for family, _, _, _, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        ip = str(addr[0])
        url = f"{scheme}://[{ip}]:{port}" if family == socket.AF_INET6 else f"{scheme}://{ip}:{port}"
        if url not in out:
            out.append(url)
    return out


def hold_key(ref: Optional[str], dataset: Optional[str], instance_id: Optional[str]) -> Optional[HoldKey]:
    """What ``POST /v1/holds`` is asked about for a create of this source (None: nothing to prefer)."""
    if ref is not None:
        return {"refs": [ref]}
    if dataset is not None and instance_id is not None:
        return {"dataset": dataset, "instance_ids": [instance_id]}
    return None


def placement_order(cands: Sequence[Tuple[Node, Dict[str, int], Optional[Dict[str, Any]]]], rng: random.Random) -> List[Node]:
    """The contract's order: among nodes with a free slot, those that hold the environment laid out
    first, then the most of its layers, then the most free slots; ties at random."""

    def score(c: Tuple[Node, Dict[str, int], Optional[Dict[str, Any]]]) -> Tuple[int, float, int, float]:
        _, cap, h = c
        present = 1 if h is not None and h.get("present") is True else 0
        layers = int(h.get("layers") or 0) if h is not None else 0
        ratio = (int(h.get("layers_present") or 0) / layers) if layers > 0 else 0.0
        return (-present, -ratio, -int(cap["free"]), rng.random())

    return [c[0] for c in sorted((c for c in cands if c[1]["free"] > 0), key=score)]


class Pool:
    """A client of many ``serve`` nodes: ``urls`` (a static list), or ``dns`` (``name:port``,
    re-resolved every ``resolve_interval`` seconds and whenever no node answers), or
    $MINISANDBOX_POOL (``dns:name:port`` or URLs separated by commas). One token for every node:
    ``token``, else $MINISANDBOX_TOKEN, else ``token_file`` / $MINISANDBOX_TOKEN_FILE.

    ``create``, ``get``, ``sandbox``, ``list``, ``evaluate`` are ``Client``'s, placed over the
    nodes; ``close()`` (or the ``with`` block's end) deletes the sandboxes made through the pool
    that are still there. ``timeout`` is a request's socket timeout (as ``Client``'s);
    ``node_timeout`` bounds a connect and a health probe; ``retry_on_capacity=S`` waits out a full
    pool for up to S seconds."""

    def __init__(
        self,
        urls: Optional[Sequence[str]] = None,
        *,
        dns: Optional[str] = None,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: float = 600.0,
        node_timeout: float = 10.0,
        max_attempts: int = 3,
        retry_on_capacity: float = 0.0,
        probe_interval: float = 5.0,
        monitor_interval: float = 2.0,
        monitor_misses: int = 3,
        resolve_interval: float = 30.0,
        capacity_max_age: float = 1.0,
        holds_max_age: float = 30.0,
        seed: Optional[int] = None,
    ) -> None:
        if urls is None and dns is None:
            urls, dns = _urls_from_env()
        if (urls is None) == (dns is None):
            raise ValueError("give the nodes as urls=[...] or dns='name:port' (or $MINISANDBOX_POOL), one of them")
        if dns is not None:
            _split_dns(dns)  # a malformed name fails here, not at the first create
        self._token = resolve_token(token, token_file)
        self.timeout = timeout
        self.node_timeout = node_timeout
        self.max_attempts = max(1, max_attempts)
        self.retry_on_capacity = retry_on_capacity
        self.probe_interval = probe_interval
        self.monitor_interval = monitor_interval
        self.monitor_misses = max(1, monitor_misses)
        self.resolve_interval = resolve_interval
        self.capacity_max_age = capacity_max_age
        self.holds_max_age = holds_max_age
        self.dns = dns
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._nodes: Dict[str, Node] = {}
        # URLs a name's records list now (a node that left them is no longer placed on)
        self._listed: set = set()
        self._resolved_at = 0.0
        # sandboxes made through the pool and not deleted since, by id
        self._held: Dict[str, Node] = {}
        # what nodes hold, by (url, key): (when asked, the answer's entry)
        self._holds: Dict[Tuple[str, str], Tuple[float, Optional[Dict[str, Any]]]] = {}
        self._probing: set = set()
        self._closed = False
        self._exec = ThreadPoolExecutor(max_workers=32, thread_name_prefix="minisandbox-pool")
        self._watch_exec = ThreadPoolExecutor(max_workers=8, thread_name_prefix="minisandbox-probe")
        if dns is not None:
            self._resolve()
        else:
            for u in urls or []:
                self._add(u)
            self._listed = {n.url for n in self._nodes.values()}
        if not self._nodes and dns is None:
            raise ValueError("a pool needs at least one node URL")
        self._probe_all()
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="minisandbox-pool-monitor", daemon=True)
        self._monitor.start()

    # -- nodes ----------------------------------------------------------------------------------

    def _add(self, url: str) -> Node:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"a node URL is http(s)://host:port, got {url!r}")
        key = url.rstrip("/")
        with self._lock:
            n = self._nodes.get(key)
            if n is None:
                n = Node(key, token=self._token, timeout=self.timeout, node_timeout=self.node_timeout, on_gone=self._gone, on_made=self._made)
                self._nodes[key] = n
            return n

    def _resolve(self) -> None:
        """Re-reads the name's records: new nodes join (probed), nodes no longer listed are not placed on."""
        assert self.dns is not None
        self._resolved_at = time.monotonic()
        try:
            urls = resolve_nodes(self.dns)
        except OSError:
            return  # keep what the last answer listed: a resolver hiccup is no reason to drop nodes
        fresh = [u for u in urls if u not in self._nodes]
        for u in urls:
            self._add(u)
        self._listed = set(urls)
        for u in fresh:
            self._nodes[u].record(self._nodes[u].probe_health())

    def _all(self) -> List[Node]:
        with self._lock:
            return list(self._nodes.values())

    def _placeable(self) -> List[Node]:
        return [n for n in self._all() if n.up and n.url in self._listed]

    def _probe_all(self) -> None:
        nodes = self._all()
        for n, h in zip(nodes, self._exec.map(lambda n: n.probe_health(), nodes)):
            n.record(h)

    def _all_named(self, name: str) -> List[Node]:
        """The nodes of that name (one, unless two servers were given the same --node-name)."""
        found = [n for n in self._all() if n.name == name]
        if found:
            return found
        # a node not probed yet (down at the start), or a new record of the name
        if self.dns is not None:
            self._resolve()
        for n in self._all():
            if n.name is None:
                n.record(n.probe_health())
        return [n for n in self._all() if n.name == name]

    def _named(self, name: str) -> Optional[Node]:
        found = self._all_named(name)
        return found[0] if found else None

    def _made(self, node: Node, sandbox_id: str) -> None:
        with self._lock:
            self._held[sandbox_id] = node

    def _gone(self, sandbox_id: str) -> None:
        with self._lock:
            node = self._held.pop(sandbox_id, None)
        if node is not None:
            node.count(+1)

    def client(self, node: str) -> NodeClient:
        """The client of the node named ``node`` (or of that URL)."""
        n = self._named(node) or self._nodes.get(node.rstrip("/"))
        if n is None:
            raise NotFoundError(f"no node {node} in the pool", code="NOT_FOUND", hint="pool.nodes() lists them")
        return n.client

    def nodes(self) -> List[Dict[str, Any]]:
        """Each node: ``{node, url, up, free, live, max, started_at, reason}`` (a fresh capacity of
        the nodes that answer; ``reason`` says why a node is down)."""

        def one(n: Node) -> Dict[str, Any]:
            cap: Dict[str, Any] = {"free": None, "live": None, "max": None}
            if n.up:
                try:
                    cap = dict(n.capacity(0.0))
                except MinisandboxError:
                    pass
            return {"node": n.name, "url": n.url, "up": n.up, **cap, "started_at": n.started_at, "reason": n.reason,
                    "listed": n.url in self._listed}

        return list(self._exec.map(one, self._all()))

    # -- placement ------------------------------------------------------------------------------

    def _hold(self, n: Node, key: Optional[HoldKey]) -> Optional[Dict[str, Any]]:
        if key is None:
            return None
        k = (n.url, repr(sorted(key.items())))
        with self._lock:
            c = self._holds.get(k)
        if c is not None and time.monotonic() - c[0] < self.holds_max_age:
            return c[1]
        try:
            h = n.holds(key)
        except MinisandboxError:
            return None  # a node that cannot say counts as cold; its capacity says if it is there
        with self._lock:
            self._holds[k] = (time.monotonic(), h)
        return h

    def _held_there(self, n: Node, key: Optional[HoldKey]) -> None:
        """A create of ``key`` succeeded on ``n``: its environment is laid out there now."""
        if key is None:
            return
        with self._lock:
            k = (n.url, repr(sorted(key.items())))
            prev = self._holds.get(k)
            entry = dict(prev[1]) if prev is not None and prev[1] is not None else {}
            entry.update({"present": True, "layers_present": entry.get("layers", 1) or 1, "layers": entry.get("layers", 1) or 1})
            self._holds[k] = (time.monotonic(), entry)

    def _candidates(self, key: Optional[HoldKey], pin: Optional[str]) -> List[Node]:
        nodes = self._placeable()
        if pin is not None:
            n = self._named(pin) or self._nodes.get(pin.rstrip("/"))
            if n is None:
                raise NotFoundError(f"no node {pin} in the pool", code="NOT_FOUND", hint="pool.nodes() lists them")
            if not n.up and not n.check(time.monotonic()):
                raise n.lost(None)
            nodes = [n]
        if not nodes:
            if self.dns is not None:
                self._resolve()
            self._probe_all()
            nodes = self._placeable()
        if not nodes:
            raise self._no_node()

        def ask(n: Node) -> Optional[Tuple[Node, Dict[str, int], Optional[Dict[str, Any]]]]:
            try:
                cap = n.capacity(self.capacity_max_age)
            except MinisandboxError:
                return None  # NodeLost marked it down; any other answer: not a place for this create
            return n, cap, self._hold(n, key)

        asked = [a for a in (self._exec.map(ask, nodes) if len(nodes) > 1 else map(ask, nodes)) if a is not None]
        if not asked and not any(n.up for n in nodes):
            raise self._no_node()
        with self._lock:
            return placement_order(asked, self._rng)

    def _no_node(self) -> TransportError:
        down = ", ".join(f"{n.label} ({n.reason})" for n in self._all()) or f"{self.dns} lists none"
        return TransportError(f"no node of the pool answers: {down}", code="NO_NODE",
                              hint="check that the nodes run and are reachable; the pool probes them back in by itself")

    def _placed(self, key: Optional[HoldKey], pin: Optional[str], fn: Callable[[Node], T], *, holds_slot: bool = True,
                next_on: Tuple[Type[BaseException], ...] = ()) -> T:
        """``fn(node)`` on the first node of the placement order that takes it: a 429 or a lost
        node moves it to the next (``max_attempts`` nodes in all); then the last error, or with
        ``retry_on_capacity``, another round once the pool has room."""
        deadline = time.monotonic() + self.retry_on_capacity
        while True:
            last: Optional[MinisandboxError] = None
            order = self._candidates(key, pin)
            for n in order[: self.max_attempts]:
                n.count(-1)  # taken now, so that creates placed meanwhile count it
                try:
                    out = fn(n)
                except CapacityError as e:
                    n.full()
                    last = e
                    continue
                except (NodeLost,) + next_on as e:  # type: ignore[misc]
                    n.count(+1)
                    last = e if isinstance(e, MinisandboxError) else MinisandboxError(str(e))
                    continue
                except BaseException:
                    n.count(+1)
                    raise
                if not holds_slot:
                    n.count(+1)
                self._held_there(n, key)
                return out
            if last is None:
                full = ", ".join(f"{n.label}" for n in self._placeable())
                last = CapacityError(f"every node of the pool is full ({full})", code="CAPACITY", status=429, retry_after=1.0,
                                     hint="wait and retry (retry_on_capacity=S does), or add nodes")
            wait = last.retry_after if isinstance(last, CapacityError) and last.retry_after is not None else 1.0
            if isinstance(last, CapacityError) and time.monotonic() + wait <= deadline:
                time.sleep(wait)
                continue
            raise last

    # -- sandboxes ------------------------------------------------------------------------------

    def create(
        self,
        ref: Optional[str] = None,
        *,
        dataset: Optional[str] = None,
        instance_id: Optional[str] = None,
        snapshot: Optional[str] = None,
        snapshot_ref: Optional[str] = None,
        node: Optional[str] = None,
        limits: Optional[Limits] = None,
        network: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        ttl: Union[None, float, str] = None,
    ) -> RemoteSandbox:
        """A new sandbox on the node placement picks (``node`` pins one): from ``ref``,
        ``dataset`` + ``instance_id``, ``snapshot`` (a snapshot of one node: made there) or
        ``snapshot_ref`` (a snapshot pushed to the registry, ``snapshot(push=True, tag=R)``:
        restored on any node). Use it as a context manager to delete it at the block's end."""
        if snapshot_ref is not None:
            if ref is not None or snapshot is not None:
                raise ValueError("give one of ref, snapshot or snapshot_ref")
            ref = snapshot_ref
        if snapshot is not None and node is None:
            node = self._snapshot_node(snapshot)
        key = hold_key(ref, dataset, instance_id)

        def make(n: Node) -> RemoteSandbox:
            return n.client.create(ref, dataset=dataset, instance_id=instance_id, snapshot=snapshot, limits=limits, network=network,
                                   env=env, workdir=workdir, ttl=ttl)

        return self._placed(key, node, make)

    def _snapshot_node(self, snapshot: str) -> str:
        def has(n: Node) -> bool:
            try:
                return any(s.snapshot == snapshot for s in n.client.snapshots())
            except MinisandboxError:
                return False

        nodes = self._placeable()
        for n, ok in zip(nodes, self._exec.map(has, nodes)):
            if ok:
                return n.name or n.url
        raise NotFoundError(f"snapshot {snapshot} not found on any node of the pool", code="NOT_FOUND",
                            hint="a snapshot lives on the node that made it; push it (snapshot(push=True, tag=R)) and create(snapshot_ref=R)")

    def _node_for(self, sandbox_id: str) -> Node:
        with self._lock:
            n = self._held.get(sandbox_id)
        if n is not None:
            return n
        name = node_of(sandbox_id)
        nodes = self._placeable() if name is None else self._all_named(name)
        if name is not None and not nodes:
            raise NotFoundError(f"sandbox {sandbox_id}: no node {name} in the pool", code="NOT_FOUND",
                                hint="the id names the node that made it: is it in the pool's list or DNS name?")
        if len(nodes) == 1:
            return nodes[0]

        # an id that names no node (a server without --node-name), or a name two nodes share: ask each
        def has(n: Node) -> bool:
            try:
                n.client.info(sandbox_id)
                return True
            except MinisandboxError:
                return False

        for n, ok in zip(nodes, self._exec.map(has, nodes)):
            if ok:
                return n
        raise NotFoundError(f"sandbox {sandbox_id} not found on any node of the pool", code="NOT_FOUND")

    def sandbox(self, sandbox_id: str) -> RemoteSandbox:
        """A handle on an existing sandbox, bound to the node its id names (without a request,
        except for an id that names no node: then every node is asked)."""
        return self._node_for(sandbox_id).client.sandbox(sandbox_id)

    def get(self, sandbox_id: str) -> RemoteSandbox:
        """A handle on an existing sandbox, looked up on its node (NotFoundError if it is gone,
        NodeLost if its node is)."""
        return self._node_for(sandbox_id).client.get(sandbox_id)

    def info(self, sandbox_id: str) -> SandboxInfo:
        return self._node_for(sandbox_id).client.info(sandbox_id)

    def delete(self, sandbox_id: str, *, missing_ok: bool = False) -> None:
        self._node_for(sandbox_id).client.delete(sandbox_id, missing_ok=missing_ok)

    def list(self) -> List[SandboxInfo]:
        """Every node's sandboxes (of the nodes that answer)."""

        def one(n: Node) -> List[SandboxInfo]:
            try:
                return n.client.list()
            except NodeLost:
                return []

        return [s for part in self._exec.map(one, self._placeable()) for s in part]

    def held(self) -> List[str]:
        """The ids of the sandboxes made through the pool and not deleted since."""
        with self._lock:
            return list(self._held)

    def evaluate(
        self,
        dataset: str,
        instance_id: str,
        patch: Optional[str],
        *,
        model: Optional[str] = None,
        run_id: Optional[str] = None,
        timeout: Union[None, float, str] = None,
    ) -> Evaluation:
        """``Client.evaluate`` on a node that holds the instance's environment and has a free slot; a
        full or lost node, or one that grades no dataset (501), moves it to the next node."""

        def grade(n: Node) -> Evaluation:
            return n.client.evaluate(dataset, instance_id, patch, model=model, run_id=run_id, timeout=timeout)

        return self._placed(hold_key(None, dataset, instance_id), None, grade, holds_slot=False, next_on=(NotConfiguredError,))

    def swerex_url(self, key: str) -> str:
        """The ``host`` for SWE-ReX's ``RemoteDeployment`` (port null) of ``key``: a sandbox id (on
        its node), or ``inst:<dataset>:<instance_id>``, placed as a create of that instance is (the
        node makes the sandbox on the key's first call)."""
        if key.startswith("inst:"):
            _, dataset, instance_id = (key.split(":", 2) + ["", ""])[:3]
            order = self._candidates(hold_key(None, dataset, instance_id), None)
            if not order:
                raise CapacityError("every node of the pool is full", code="CAPACITY", status=429, retry_after=1.0)
            n = order[0]
            n.count(-1)
        else:
            n = self._node_for(key)
        return f"{n.url}/swerex/{urllib.parse.quote(key, safe=':')}"

    # -- prefetch -------------------------------------------------------------------------------

    def prefetch(
        self,
        refs: Optional[Sequence[str]] = None,
        *,
        dataset: Optional[str] = None,
        instance_ids: Optional[Sequence[str]] = None,
        io_budget: Union[None, int, str] = None,
    ) -> Dict[str, Dict[str, Any]]:
        """Starts every node pulling ``refs`` or a dataset's environments in the background (each
        blob once per node); by node, its ``GET /v1/prefetch`` answer (or ``{"error": ...}``)."""
        body: Dict[str, Any] = {}
        if refs is not None:
            body["refs"] = list(refs)
        if dataset is not None:
            body["dataset"] = dataset
        if instance_ids is not None:
            body["instance_ids"] = list(instance_ids)
        if io_budget is not None:
            body["io_budget"] = io_budget
        return self._each(lambda n: n.client.transport.request("POST", "/v1/prefetch", json_body=body, timeout=self.node_timeout * 6).json())

    def prefetch_status(self) -> Dict[str, Dict[str, Any]]:
        """By node, how its prefetch goes: ``{state, total, done, failed, bytes_fetched, ...}``."""
        return self._each(lambda n: n.client.transport.request("GET", "/v1/prefetch", timeout=self.node_timeout).json())

    def _each(self, fn: Callable[[Node], Any]) -> Dict[str, Any]:
        def one(n: Node) -> Tuple[str, Any]:
            try:
                return n.label, fn(n)
            except MinisandboxError as e:
                return n.label, {"error": {"code": e.code, "message": e.message}}

        return dict(self._exec.map(one, self._placeable()))

    # -- monitor --------------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._stop.wait(self.monitor_interval):
            try:
                self._tick()
            except Exception:  # the monitor must outlive any one bad tick (a node answering garbage)
                continue

    def _tick(self) -> None:
        now = time.monotonic()
        if self.dns is not None and now - self._resolved_at >= self.resolve_interval:
            self._resolve()
        for n in self._all():
            if not n.up:
                n.client.transport.abort_busy()  # a call that slipped in before it was marked down
                if n.down_since is not None and now - n.last_probe >= self.probe_interval:
                    self._probe_once(n, self._revive)
            elif n.client.transport.busy > 0:
                self._probe_once(n, self._check_busy)

    def _probe_once(self, n: Node, fn: Callable[[Node], None]) -> None:
        with self._lock:
            if n.url in self._probing:
                return
            self._probing.add(n.url)

        def run() -> None:
            try:
                fn(n)
            finally:
                with self._lock:
                    self._probing.discard(n.url)

        self._watch_exec.submit(run)

    def _revive(self, n: Node) -> None:
        n.record(n.probe_health(), n.reason)

    def _check_busy(self, n: Node) -> None:
        """A node with calls in flight: ``monitor_misses`` probes unanswered in a row and it is down,
        its calls broken (they raise NodeLost)."""
        h = n.probe_health(timeout=self.monitor_interval)
        if h is not None:
            n.record(h)
            return
        n.misses += 1
        if n.misses >= self.monitor_misses:
            n.mark_down("unresponsive")
            n.client.transport.abort_busy()

    # -- end ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Deletes the sandboxes made through the pool that are still there (those of lost nodes
        are gone with them), stops the monitor and closes the connections."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        ids = self.held()

        def drop(sid: str) -> None:
            try:
                self._node_for(sid).client.delete(sid, missing_ok=True)
            except MinisandboxError:
                pass  # a node that cannot be reached: its idle timeout ends the sandbox

        list(self._exec.map(drop, ids))
        self._monitor.join(timeout=self.monitor_interval + self.node_timeout)
        self._exec.shutdown(wait=True)
        self._watch_exec.shutdown(wait=False)
        for n in self._all():
            n.client.close()
            n.probe.close()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Pool({[n.label for n in self._all()]!r})"


__all__ = ["Pool", "resolve_nodes", "placement_order", "hold_key"]

"""A node that dies is a clear event: calls on its sandboxes raise ``NodeLost`` (node, sandbox id,
reason) in a bounded time, whether the node refuses connections (killed), stops answering with a
call in flight (frozen: the pool's monitor breaks the call), or restarted (410 NODE_RESTARTED);
the pool places nothing there, keeps serving on the others and probes the node back in. Against
small in-process nodes (fake_node.py); against real ``serve`` killed with -9, see
test_pool_over_hosts_in_network_namespaces.py. Timings are only asserted as bounds far above
what they take (they catch a call left to its 600 s socket timeout, not a slow machine)."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Iterator, List

import pytest

from fake_node import FakeNode
from minisandbox import AsyncPool, Client, NodeLost, Pool, TransportError


@pytest.fixture()
def nodes() -> Iterator[List[FakeNode]]:
    ns = [FakeNode("n1"), FakeNode("n2")]
    yield ns
    for n in ns:
        n.close()


def eventually(pred: Any, what: str) -> None:
    """Waits for ``pred()`` with no deadline of its own (the test's timeout catches a hang)."""
    while not pred():
        time.sleep(0.05)


def test_a_killed_node_gives_node_lost_for_its_sandboxes_and_the_pool_serves_on(nodes: List[FakeNode]) -> None:
    with Pool([n.url for n in nodes], probe_interval=3600) as pool:
        a = pool.create("env", node="n1")
        b = pool.create("env", node="n2")
        nodes[0].kill()
        t0 = time.monotonic()
        with pytest.raises(NodeLost) as e:
            a.exec("true")
        assert time.monotonic() - t0 < 60
        assert (e.value.node, e.value.sandbox_id, e.value.reason, e.value.code) == ("n1", a.id, "unreachable", "NODE_LOST")
        assert isinstance(e.value, TransportError) and e.value.__cause__ is not None
        assert "drop these episodes" in (e.value.hint or "")
        # later calls fail at once, without a request; the other node's sandbox is untouched
        with pytest.raises(NodeLost):
            a.read_file("/etc/hostname")
        assert not a.is_alive()
        assert b.exec("true").ok
        assert {n["node"]: n["up"] for n in pool.nodes()} == {"n1": False, "n2": True}
        for _ in range(3):
            assert pool.create("env").id.endswith(".n2")
        a.delete(missing_ok=True)  # gone with its node: no error for a cleanup
        assert a.id not in pool.held()


def test_a_call_in_flight_on_a_node_that_stops_answering_is_failed_by_the_monitor(nodes: List[FakeNode]) -> None:
    with Pool([n.url for n in nodes], monitor_interval=0.2, monitor_misses=3, probe_interval=0.2) as pool:
        a = pool.create("env", node="n1")
        out: Dict[str, Any] = {}

        def call() -> None:
            t0 = time.monotonic()
            try:
                a.exec("hang", timeout=600)  # its socket would wait 660 s
            except BaseException as e:
                out["error"] = e
            out["took"] = time.monotonic() - t0

        eventually(lambda: True, "")
        th = threading.Thread(target=call)
        th.start()
        eventually(lambda: nodes[0].count("POST", f"/v1/sandboxes/{a.id}/exec") == 1, "the exec reached the node")
        nodes[0].freeze()  # it answers nothing from now on, health included
        th.join(timeout=120)
        assert not th.is_alive()
        e = out["error"]
        assert isinstance(e, NodeLost) and e.reason == "unresponsive" and e.sandbox_id == a.id, e
        assert out["took"] < 60
        assert "stopped answering health probes" in str(e)
        # thawed, it is probed back in and its sandbox is there again (it never went away)
        nodes[0].thaw()
        eventually(lambda: a.is_alive(), "n1 probed back in")
        assert a.exec("true").ok


def test_a_restarted_node_answers_410_for_what_it_held_and_is_placed_on_again(nodes: List[FakeNode]) -> None:
    with Pool([n.url for n in nodes], probe_interval=0.2) as pool:
        a = pool.create("env", node="n1")
        nodes[0].kill()
        with pytest.raises(NodeLost):
            a.exec("true")
        nodes[0].restart()
        eventually(lambda: {n["node"]: n["up"] for n in pool.nodes()}["n1"], "n1 probed back in")
        with pytest.raises(NodeLost) as e:
            a.exec("true")
        assert (e.value.reason, e.value.sandbox_id, e.value.node, e.value.status) == ("restarted", a.id, "n1", 410)
        assert "restarted" in str(e.value)
        assert pool.create("env", node="n1").id.endswith(".n1")


def test_a_plain_client_raises_node_lost_for_410_node_restarted() -> None:
    n = FakeNode("solo")
    try:
        c = Client(n.url)
        sb = c.create("env")
        n.kill()
        n.restart()
        with pytest.raises(NodeLost) as e:
            sb.exec("true")
        assert e.value.reason == "restarted" and e.value.node == "solo" and e.value.sandbox_id == sb.id
    finally:
        n.close()


def test_no_node_answering_is_a_transport_error_that_says_so(nodes: List[FakeNode]) -> None:
    with Pool([n.url for n in nodes], probe_interval=3600) as pool:
        for n in nodes:
            n.kill()
        with pytest.raises(TransportError) as e:
            pool.create("env")
        assert e.value.code == "NO_NODE" and "no node of the pool answers" in str(e.value)


def test_the_async_pool_raises_node_lost_too(nodes: List[FakeNode]) -> None:
    import asyncio

    async def main() -> None:
        async with AsyncPool([n.url for n in nodes], probe_interval=3600) as pool:
            a = await pool.create("env", node="n1")
            b = await pool.create("env", node="n2")
            assert (await b.exec("true")).ok
            nodes[0].kill()
            with pytest.raises(NodeLost):
                await a.exec("true")
            assert [s.id for s in await pool.list()] == [b.id]
        assert not nodes[1].sandboxes  # closed: what it made is deleted

    asyncio.run(main())

"""The pool's placement, against small in-process nodes (fake_node.py): a create goes to the node
that holds the environment laid out, then to the one with the most of its layers, then to the one
with the most free slots; a 429 or a dead node moves it on, at most ``max_attempts`` nodes; a node
without ``/v1/holds`` counts as cold; every handle stays on the node its id names; ``close()``
deletes what the pool made. No real server: the pool against real ``serve`` nodes is in
test_pool_over_real_nodes.py and test_pool_over_hosts_in_network_namespaces.py."""

from __future__ import annotations

import random
from typing import Iterator, List

import pytest

from fake_node import FakeNode
from minisandbox import CapacityError, Client, NotFoundError, Pool
from minisandbox._node import Node
from minisandbox.pool import placement_order


@pytest.fixture()
def nodes() -> Iterator[List[FakeNode]]:
    ns = [
        FakeNode("n1", max_sandboxes=4, holds={"env/a": (True, 3, 3)}),
        FakeNode("n2", max_sandboxes=4, holds={"env/a": (False, 2, 3)}),
        FakeNode("n3", max_sandboxes=8),
    ]
    yield ns
    for n in ns:
        n.close()


def node_of(sb_id: str) -> str:
    return sb_id.rsplit(".", 1)[1]


def test_a_create_goes_where_the_env_is_then_most_layers_then_most_free(nodes: List[FakeNode]) -> None:
    with Pool([n.url for n in nodes], seed=1) as pool:
        assert node_of(pool.create("env/a").id) == "n1"  # laid out there
        nodes[0].full = True  # n1 answers 429 now: the create moves to the next in order
        assert node_of(pool.create("env/a").id) == "n2"  # 2 of its 3 layers
        assert nodes[0].count("POST", "/v1/sandboxes") == 2
        assert node_of(pool.create("env/b").id) == "n3"  # no node holds it: the most free slots
        assert sorted(n["node"] for n in pool.nodes()) == ["n1", "n2", "n3"]


def test_creates_spread_over_the_nodes_by_their_free_slots(nodes: List[FakeNode]) -> None:
    with Pool([n.url for n in nodes], seed=2) as pool:
        made = [pool.create("env/cold") for _ in range(16)]
        on = [node_of(sb.id) for sb in made]
        # n3 has 8 slots, the others 4: the most free first, each create counted as it is placed
        assert sorted(on.count(n) for n in ("n1", "n2", "n3")) == [4, 4, 8]
        with pytest.raises(CapacityError) as e:
            pool.create("env/cold")
        assert "every node of the pool is full" in str(e.value)


def test_full_nodes_are_tried_at_most_max_attempts(nodes: List[FakeNode]) -> None:
    for n in nodes:
        n.full = True
    with Pool([n.url for n in nodes], max_attempts=2, capacity_max_age=0.0) as pool:
        with pytest.raises(CapacityError):
            pool.create("env/a")
        assert sum(n.count("POST", "/v1/sandboxes") for n in nodes) == 2


def test_a_dead_node_moves_the_create_on_and_is_placed_on_no_more(nodes: List[FakeNode]) -> None:
    with Pool([n.url for n in nodes], seed=3, probe_interval=3600) as pool:
        nodes[0].kill()
        sb = pool.create("env/a")  # n1 holds it, but is gone: the next in order takes it
        assert node_of(sb.id) == "n2"
        assert [n["up"] for n in sorted(pool.nodes(), key=lambda n: n["url"] == nodes[0].url)] == [True, True, False]
        for _ in range(3):
            assert node_of(pool.create("env/a").id) != "n1"


def test_a_node_without_holds_counts_as_cold_and_is_asked_once() -> None:
    old = FakeNode("old", max_sandboxes=8, has_holds_route=False)
    new = FakeNode("new", max_sandboxes=2, holds={"env/a": (True, 3, 3)})
    try:
        with Pool([old.url, new.url], holds_max_age=0.0) as pool:
            assert [node_of(pool.create("env/a").id) for _ in range(4)] == ["new", "new", "old", "old"]
            assert old.count("POST", "/v1/holds") == 1
    finally:
        old.close()
        new.close()


def test_handles_stay_on_the_node_their_id_names(nodes: List[FakeNode]) -> None:
    with Pool([n.url for n in nodes]) as pool:
        sb = pool.create("env/a", node="n2")
        assert node_of(sb.id) == "n2" and sb.client.base_url == nodes[1].url
        assert pool.get(sb.id).client is sb.client
        assert sb.exec("true").stdout == "ok\n"
        assert nodes[1].count("POST", f"/v1/sandboxes/{sb.id}/exec") == 1
        assert sum(n.count("POST", f"/v1/sandboxes/{sb.id}") for n in (nodes[0], nodes[2])) == 0
        assert [s.id for s in pool.list()] == [sb.id]
        with pytest.raises(NotFoundError, match="no node n9"):
            pool.get("sb-1-00000000.n9")


def test_ids_that_name_no_node_are_found_on_theirs() -> None:
    a, b = FakeNode(None), FakeNode(None)
    try:
        with Pool([a.url, b.url]) as pool:
            sb = pool.create("env/x", node=b.url)
            assert "." not in sb.id
            assert pool.get(sb.id).client.base_url == b.url  # tracked: made through this pool
        assert not b.sandboxes  # the pool's close deleted it
        made_elsewhere = Client(b.url).create("env/x")
        with Pool([a.url, b.url]) as other:
            assert other.get(made_elsewhere.id).client.base_url == b.url  # asked of every node
            assert a.count("GET", f"/v1/sandboxes/{made_elsewhere.id}") == 1
        assert b.sandboxes == {made_elsewhere.id}  # not the pool's: close leaves it
    finally:
        a.close()
        b.close()


def test_close_deletes_what_the_pool_made_and_still_holds(nodes: List[FakeNode]) -> None:
    pool = Pool([n.url for n in nodes])
    made = [pool.create("env/a") for _ in range(6)]
    made[0].delete()
    fork_like = pool.sandbox(made[1].id)  # a handle without a request, on the same node
    assert fork_like.client is made[1].client
    assert len(pool.held()) == 5
    pool.close()
    assert all(not n.sandboxes for n in nodes)
    assert sum(n.count("DELETE", "/v1/sandboxes/") for n in nodes) == 6


def test_placement_order_is_the_contracts() -> None:
    def node(name: str) -> Node:
        n = Node.__new__(Node)
        n.name = name
        return n

    a, b, c, d = node("a"), node("b"), node("c"), node("d")
    cands = [
        (a, {"free": 9}, None),
        (b, {"free": 1}, {"present": True, "layers_present": 3, "layers": 3}),
        (c, {"free": 5}, {"present": False, "layers_present": 2, "layers": 3}),
        (d, {"free": 0}, {"present": True, "layers_present": 3, "layers": 3}),  # full: not a candidate
    ]
    assert placement_order(cands, random.Random(0)) == [b, c, a]
    # ties go either way, at random
    tied = [(a, {"free": 2}, None), (c, {"free": 2}, None)]
    firsts = {placement_order(tied, random.Random(seed))[0].name for seed in range(20)}
    assert firsts == {"a", "c"}


def test_two_nodes_of_one_name_are_told_apart_by_asking_them() -> None:
    # serve names a node by its host name unless told: two on one host share it
    a, b = FakeNode("same"), FakeNode("same")
    try:
        made = Client(b.url).create("env/x")
        with Pool([a.url, b.url]) as pool:
            assert pool.get(made.id).client.base_url == b.url
    finally:
        a.close()
        b.close()

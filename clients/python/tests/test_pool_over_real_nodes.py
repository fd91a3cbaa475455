"""A pool over two real ``serve`` nodes on loopback that share one registry (``server``, room for
24, and ``small_server``, room for 3): creates are placed and their handles stay on their node,
``run_group`` forks on one node when the group fits and goes through the registry when it does
not, the adapters and the SWE-ReX face work through the pool unchanged, a DNS name's records are
the nodes, and ``close()`` leaves nothing on either node. Hosts of their own, a killed node and
prefetch: test_pool_over_hosts_in_network_namespaces.py."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Iterator, Optional, Tuple

import pytest

from conftest import REF, Server
from minisandbox import Client, NotConfiguredError, Pool, RemoteSandbox, Session
from minisandbox.adapters import MinisandboxEnvironment, Sandbox, run_group


@pytest.fixture()
def pool(server: Server, small_server: Server) -> Iterator[Pool]:
    p = Pool([server.url, small_server.url], token_file=server.token_file)
    yield p
    p.close()
    for s in (server, small_server):
        with Client(s.url, token_file=server.token_file) as c:
            assert c.list() == [], f"{s.url} still holds sandboxes after the pool closed"


def test_creates_are_placed_and_handles_stay_on_their_node(pool: Pool, server: Server, small_server: Server) -> None:
    big = pool.create(REF)
    assert big.client.base_url == server.url  # cold everywhere: the node with the most free slots
    small = pool.create(REF, node=small_server.url)
    assert small.client.base_url == small_server.url
    small.write_file("/tmp/where", "small\n")
    assert pool.get(small.id).read_text("/tmp/where") == "small\n"
    assert pool.get(big.id).client.base_url == server.url
    assert {s.id for s in pool.list()} >= {big.id, small.id}
    by_url = {n["url"]: n for n in pool.nodes()}
    assert by_url[small_server.url]["max"] == 3 and by_url[small_server.url]["live"] == 1 and by_url[small_server.url]["up"]
    assert sorted(pool.held()) == sorted([big.id, small.id])
    # a sandbox the pool did not make is the caller's: close leaves it
    with Client(small_server.url, token_file=server.token_file) as c:
        own = c.create(REF)
        pool.close()
        assert [s.id for s in c.list()] == [own.id]
        own.delete()


def test_a_group_that_fits_forks_on_its_node(pool: Pool, small_server: Server) -> None:
    def policy(sb: RemoteSandbox, i: int, _s: Optional[Session]) -> Tuple[str, str]:
        return sb.client.base_url, sb.read_text("/task/start")

    g = run_group(pool, ref=REF, n=2, node=small_server.url, prepare=lambda p: p.write_file("/task/start", "prepared\n"),
                  policy=policy, reward=lambda sb, out: 1.0)
    assert [r.output for r in g.rollouts] == [(small_server.url, "prepared\n")] * 2
    assert g.rewards == [1.0, 1.0]


def test_a_group_that_does_not_fit_goes_through_the_registry_to_other_nodes(pool: Pool, server: Server, small_server: Server) -> None:
    def prepare(parent: RemoteSandbox) -> None:
        parent.write_file("/task/start", "prepared\n")
        parent.exec("mkdir -p /repo && rm /etc/group").check()  # a deletion travels too

    def policy(sb: RemoteSandbox, i: int, s: Optional[Session]) -> Tuple[str, str, str]:
        assert s is not None
        state = s.run('echo "$PHASE $(pwd)"').stdout
        files = sb.exec("cat /task/start; test -e /etc/group && echo has-group || echo no-group").stdout
        sb.write_file("/task/answer", str(i))
        return sb.client.base_url, state, files

    # the parent is on the node with room for 3: 4 children do not fit beside it
    g = run_group(pool, ref=REF, n=4, node=small_server.url, prepare=prepare, policy=policy,
                  session_startup=["cd /repo", "export PHASE=rollout"], reward=lambda sb, out: float(sb.read_text("/task/answer")))
    assert g.rewards == [0.0, 1.0, 2.0, 3.0], g.errors
    urls = [r.output[0] for r in g.rollouts]
    # the parent's node has the pushed state laid out and is placed on first, while it has room (2)
    assert urls.count(small_server.url) <= 2 and urls.count(server.url) >= 2, urls
    for _, state, files in (r.output for r in g.rollouts):
        assert state == "rollout /repo\n"
        assert files == "prepared\nno-group\n"
    # the snapshot the group went through is not left on the parent's node
    with Client(small_server.url, token_file=server.token_file) as c:
        assert c.snapshots() == []


def test_the_adapters_work_through_the_pool(pool: Pool, server: Server) -> None:
    with Sandbox(REF, client=pool) as sb:
        assert sb.exec("echo $GREETING").strip() == "hello"
        assert sb.remote.id in pool.held()
    assert sb.remote.id not in pool.held()
    env = MinisandboxEnvironment(ref=REF, client=pool, interpreter=["sh", "-c"])
    try:
        assert env.execute("echo hi") == {"output": "hi\n", "returncode": 0}
    finally:
        env.cleanup()
    # neither node grades a dataset: each says so (501) and the last answer is raised
    with pytest.raises(NotConfiguredError):
        pool.evaluate("data", "x__y-1", "diff")


def test_the_swerex_face_is_reached_through_the_pool(pool: Pool, server: Server) -> None:
    sb = pool.create(REF)
    host = pool.swerex_url(sb.id)
    assert host == f"{sb.client.base_url}/swerex/{urllib.parse.quote(sb.id, safe=':')}"
    token = open(server.token_file).read().strip()
    req = urllib.request.Request(f"{host}/is_alive", headers={"X-API-Key": token})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert json.loads(r.read())["is_alive"] is True
    inst = pool.swerex_url("inst:data:x__y-1")
    assert inst.startswith(server.url + "/swerex/inst:data:x__y-1")


def test_a_dns_name_gives_the_pool_its_nodes(server: Server) -> None:
    port = urllib.parse.urlsplit(server.url).port
    with Pool(dns=f"localhost:{port}", token_file=server.token_file) as p:
        assert [n["url"] for n in p.nodes() if n["up"]] == [f"http://127.0.0.1:{port}"]
        with p.create(REF) as sb:
            assert sb.exec("echo ok").stdout == "ok\n"

"""Many nodes, one pool, over real TCP between hosts of their own on this machine (hosts.py:
network namespaces joined by veth pairs to a bridge): ``reg`` runs the S3-protocol registry
(s3rver behind one request-logging proxy per client, test/s3/registry-host.ts), ``n1``..``n3``
run ``serve`` with stores of their own, ``cli`` runs the client (this test's thread enters it).

Shown here: 96 sandboxes spread over the three nodes, each on the node its environment is warm
on; a node killed with -9 mid-episode gives NodeLost for exactly its sandboxes while the others
finish, the pool keeps placing on the others and takes the node back once it runs again; a
snapshot pushed on n1 forks on n3 with the same files; a prefetch pulls each blob from the
registry once per node; a DNS name whose records are the nodes makes the pool; and nothing is
left on any node after the pool closes. The namespaces are made and removed here; the test skips,
saying why, where the machine cannot make them. Parts that need the server side of the pool
(``--node-name``, ``POST /v1/holds``, ``/v1/prefetch``) skip where this checkout's serve lacks it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from conftest import BIN, REPO, busybox_root, serve_takes, work_dir
from hosts import Hosts, can_make_namespaces
from minisandbox import Client, NodeLost, NotFoundError, Pool, RemoteSandbox

HOSTS = {"reg": 2, "cli": 3, "n1": 11, "n2": 12, "n3": 13}
NODES = ("n1", "n2", "n3")
PORT = 7000
ENVS = {"py/env-a": "n1", "py/env-b": "n2", "py/env-c": "n3"}  # each env is made warm on one node
PREFETCHED = "py/env-d"  # on no node until the prefetch
TSX = f"file://{REPO}/node_modules/tsx/dist/loader.mjs"


class Registry:
    def __init__(self, proc: "subprocess.Popen[str]", info: Dict[str, Any]) -> None:
        self.proc = proc
        self.info = info
        self._lock = threading.Lock()

    def url(self, i: int) -> str:
        """The registry as client ``i`` names it: ``s3://`` with the endpoint only it is given."""
        return f"s3://{self.info['bucket']}/pool?endpoint={self.info['endpoints'][i]}"

    def logs(self) -> List[List[Dict[str, Any]]]:
        """Every request each endpoint has had, by endpoint."""
        with self._lock:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write("log\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())["logs"]  # type: ignore[no-any-return]


class Cluster:
    def __init__(self, net: Hosts, work: Path, registry: Registry, token_file: str) -> None:
        self.net = net
        self.work = work
        self.registry = registry
        self.token_file = token_file
        self.procs: Dict[str, "subprocess.Popen[bytes]"] = {}
        self.env = {**os.environ, "AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER", "AWS_REGION": "us-east-1"}
        self.node_names = serve_takes("--node-name")

    def url(self, node: str) -> str:
        return f"http://{self.net.addr(node)}:{PORT}"

    def cli(self, i: int, node: str) -> List[str]:
        return [str(BIN), "--progress", "none", "--registry", self.registry.url(i), "--store", str(self.work / node / "store")]

    def start(self, node: str) -> None:
        """``serve`` on ``node`` (its own store, the shared token), until it says where it listens."""
        i = NODES.index(node)
        (self.work / node).mkdir(exist_ok=True)
        log = open(self.work / node / "serve.log", "ab")
        names = ["--node-name", node] if self.node_names else []
        argv = [*self.cli(i, node), "serve", "--listen", f"{self.net.addr(node)}:{PORT}", "--token-file", self.token_file,
                "--max-sandboxes", "40", *names]
        p = self.net.popen(node, argv, stdout=subprocess.PIPE, stderr=log, env=self.env)
        log.close()
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"serve on {node} exited {p.wait()}: {(self.work / node / 'serve.log').read_text()[-2000:]}")
        self.procs[node] = p

    def stop(self, node: str) -> None:
        p = self.procs.pop(node, None)
        if p is None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def client(self, node: str) -> Client:
        return Client(self.url(node), token_file=self.token_file)

    def pool(self, **kw: Any) -> Pool:
        return Pool([self.url(n) for n in NODES], token_file=self.token_file, **kw)

    def node_of(self, sb: RemoteSandbox) -> str:
        """The node a handle is bound to (by its URL: the id names it only where serve has --node-name)."""
        return next(n for n in NODES if sb.client.base_url == self.url(n))

    def routes(self) -> set:
        with self.client("n1") as c:
            return {(m.upper(), p) for p, ops in c.openapi().get("paths", {}).items() for m in ops}


def import_env(cluster: Cluster, tag: str, extra: Dict[str, bytes]) -> None:
    root = cluster.work / "roots" / tag.replace("/", "-")
    busybox_root(root)
    for rel, data in extra.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    store = cluster.work / "import-store"
    subprocess.run([str(BIN), "--progress", "none", "--registry", cluster.registry.url(3), "--store", str(store), "import", str(root),
                    "--tag", tag, "--workdir", "/root"], check=True, capture_output=True, timeout=600, env=cluster.env)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    why = None if shutil.which("ip") and shutil.which("nsenter") else "needs iproute2's ip and util-linux's nsenter"
    why = why or can_make_namespaces()
    if why is not None:
        pytest.skip(why)
    work = work_dir("ms-pool-hosts-")
    token_file = str(work / "token")
    Path(token_file).write_text(secrets.token_hex(32) + "\n")
    os.chmod(token_file, 0o600)
    net = Hosts(HOSTS).up()
    reg_proc: Optional["subprocess.Popen[str]"] = None
    cl: Optional[Cluster] = None
    try:
        reg_proc = subprocess.Popen(
            net.argv("reg", ["node", "--import", TSX, str(REPO / "test/s3/registry-host.ts"), "--host", net.addr("reg"), "--clients", "4"]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(work / "registry.log", "wb"), text=True, cwd=REPO)
        assert reg_proc.stdout is not None
        line = reg_proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the registry host exited {reg_proc.wait()}: {(work / 'registry.log').read_text()[-2000:]}")
        cl = Cluster(net, work, Registry(reg_proc, json.loads(line)), token_file)
        with net.inside("cli"):
            # the environments: busybox roots told apart by a file (the prefetched one by 1 MiB of its own)
            envs = {tag: {"env": tag.encode()} for tag in ENVS}
            envs[PREFETCHED] = {"env": PREFETCHED.encode(), "data/blob": secrets.token_bytes(1 << 20)}
            with ThreadPoolExecutor(max_workers=2) as ex:
                list(ex.map(lambda kv: import_env(cl, kv[0], kv[1]), envs.items()))  # type: ignore[union-attr]
                list(ex.map(cl.start, NODES))
            for tag, node in ENVS.items():  # each env laid out on its one node
                with cl.client(node) as c:
                    assert [r.ok for r in c.prewarm([tag])] == [True]
        yield cl  # each test enters the client host itself (the `inside` fixture)
    finally:
        if cl is not None:
            for n in NODES:
                cl.stop(n)
        if reg_proc is not None and reg_proc.stdin is not None:
            reg_proc.stdin.close()
            try:
                reg_proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                reg_proc.kill()
        net.down()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture()
def inside(cluster: Cluster) -> Iterator[Cluster]:
    """The test's thread on the client host."""
    with cluster.net.inside("cli"):
        yield cluster


def need(cluster: Cluster, method: str, path: str) -> None:
    if (method, path) not in cluster.routes():
        pytest.skip(f"this checkout's serve has no {method} {path} yet (the pool's server side)")


def test_96_sandboxes_spread_over_three_nodes_each_where_its_env_is_warm(inside: Cluster) -> None:
    need(inside, "POST", "/v1/holds")
    tags = [t for t in ENVS for _ in range(32)]
    with inside.pool() as pool:

        def one(tag: str) -> Tuple[str, str, str]:
            sb = pool.create(tag, limits={"memory": "64m", "pids": 32})
            return tag, inside.node_of(sb), sb.exec("cat /env").stdout

        with ThreadPoolExecutor(max_workers=12) as ex:
            made = list(ex.map(one, tags))
        assert len(made) == 96
        for tag, node, seen in made:
            assert (node, seen) == (ENVS[tag], tag), f"{tag} placed on {node}"
        assert sorted(n["live"] for n in pool.nodes()) == [32, 32, 32]
        if inside.node_names:
            assert all(sid.endswith(f".{pool.client(sid.rsplit('.', 1)[1]).node.name}") for sid in pool.held())
    for n in NODES:
        with inside.client(n) as c:
            assert c.list() == []


def test_a_prefetch_pulls_each_blob_from_the_registry_once_per_node(inside: Cluster) -> None:
    need(inside, "POST", "/v1/prefetch")
    before = [len(log) for log in inside.registry.logs()]
    with inside.pool() as pool:
        started = pool.prefetch([PREFETCHED])
        assert sorted(started) == sorted(NODES) if inside.node_names else len(started) == 3
        while any(s.get("state") in ("idle", "running") for s in pool.prefetch_status().values()):
            time.sleep(0.2)
        status = pool.prefetch_status()
        assert all(s["state"] == "done" and s["done"] == 1 and not s["failed"] for s in status.values()), status
        first = [len(log) for log in inside.registry.logs()]
        again = pool.prefetch([PREFETCHED])  # all there: nothing more is fetched
        assert all("error" not in s for s in again.values()), again
        while any(s.get("state") in ("idle", "running") for s in pool.prefetch_status().values()):
            time.sleep(0.2)
        second = inside.registry.logs()
        assert [[r for r in log[first[i]:] if "/blobs/" in r["path"]] for i, log in enumerate(second[:3])] == [[], [], []]
        # what the prefetch pulled is there: a create of it on any node pulls nothing more
        for n in NODES:
            with pool.create(PREFETCHED, node=inside.url(n)) as sb:
                assert sb.exec("wc -c < /data/blob").stdout.strip() == str(1 << 20)
    logs = inside.registry.logs()
    fetched: List[Dict[str, List[Optional[str]]]] = []
    for i, n in enumerate(NODES):
        blobs: Dict[str, List[Optional[str]]] = {}
        for r in logs[i][before[i]:]:
            if r["method"] == "GET" and "/blobs/" in r["path"]:
                blobs.setdefault(r["path"], []).append(r["range"])
        fetched.append(blobs)
        for path, ranges in blobs.items():
            # once: one whole GET, or ranges that never cover a byte twice
            assert ranges.count(None) <= 1 and (None not in ranges or len(ranges) == 1), (n, path, ranges)
            spans = sorted(tuple(int(x) for x in r.split("=")[1].split("-")) for r in ranges if r is not None)
            assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), (n, path, spans)
    # each node fetched the blobs only the prefetched env has itself (what else it fetched depends
    # on what it held before: each node had another env laid out)
    assert set(fetched[0]) & set(fetched[1]) & set(fetched[2])


def test_a_snapshot_pushed_on_one_node_forks_on_another_with_the_same_files(inside: Cluster) -> None:
    tree = ("find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path /run -o -path /etc/hostname "
            "-o -path /etc/hosts -o -path /etc/resolv.conf \\) -prune -o \\( -type f -o -type l \\) -print | sort | xargs md5sum")
    with inside.pool() as pool:
        a = pool.create("py/env-a", node=inside.url("n1"))
        a.exec("mkdir -p /work && echo moved > /work/state && rm /env && ln -s /work/state /work/link").check()
        files = a.exec(tree).check().stdout
        snap = a.snapshot(push=True, tag="snaps/moved")
        assert snap.ref == "snaps/moved"
        b = pool.create(snapshot_ref="snaps/moved", node=inside.url("n3"))
        assert inside.node_of(b) == "n3"
        children = b.fork(2)
        assert all(c.ok for c in children), children
        for c in children:
            assert c.sandbox is not None and inside.node_of(c.sandbox) == "n3"
            assert c.sandbox.exec(tree).check().stdout == files
            assert c.sandbox.read_text("/work/link") == "moved\n"
        assert len(files.splitlines()) > 100  # busybox's applets and /etc: the listing is the tree


def test_a_node_killed_mid_episode_gives_node_lost_for_exactly_its_sandboxes(inside: Cluster) -> None:
    with inside.pool(probe_interval=1.0) as pool:
        sbs = [pool.create(tag, node=inside.url(node)) for tag, node in ENVS.items() for _ in range(4)]
        out: Dict[str, Any] = {}

        def episode(sb: RemoteSandbox) -> None:
            try:
                out[sb.id] = sb.exec("touch /tmp/started; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo done", timeout=600)
            except Exception as e:
                out[sb.id] = e
            out[sb.id + "@"] = time.monotonic()

        threads = [threading.Thread(target=episode, args=(sb,)) for sb in sbs]
        for t in threads:
            t.start()
        for sb in sbs:  # every episode is in its command
            while True:
                try:
                    sb.read_file("/tmp/started")
                    break
                except NotFoundError:
                    time.sleep(0.1)
        victim = inside.procs["n2"]
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        victim.wait()
        inside.procs.pop("n2")
        lost = [sb for sb in sbs if inside.node_of(sb) == "n2"]
        for t, sb in zip(threads, sbs):
            if sb in lost:
                t.join(timeout=120)
        for sb in sbs:
            if sb not in lost:
                sb.write_file("/tmp/go", "")
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive()
        for sb in sbs:
            r = out[sb.id]
            if sb in lost:
                assert isinstance(r, NodeLost) and r.sandbox_id == sb.id, r
                assert r.node == ("n2" if inside.node_names else inside.url("n2"))
            else:
                assert not isinstance(r, Exception) and r.stdout == "done\n", r
        took = max(out[sb.id + "@"] for sb in lost) - killed_at
        print(f"NodeLost surfaced {took * 1000:.0f} ms after kill -9")
        # the pool serves on: env-b is warm on n2 only, and lands elsewhere
        other = pool.create("py/env-b")
        assert inside.node_of(other) != "n2" and other.exec("cat /env").stdout == "py/env-b"
        assert {n["url"]: n["up"] for n in pool.nodes()}[inside.url("n2")] is False
        # n2 runs again (its store reaped of what the killed server left): probed back in
        inside.start("n2")
        while not {n["url"]: n["up"] for n in pool.nodes()}[inside.url("n2")]:
            time.sleep(0.2)
        back = pool.create("py/env-b", node=inside.url("n2"))
        assert back.exec("cat /env").stdout == "py/env-b"
        if inside.node_names:  # its earlier sandboxes: lost with the process that held them
            with pytest.raises(NodeLost) as e:
                lost[0].exec("true")
            assert e.value.reason == "restarted" and e.value.status == 410
        else:
            with pytest.raises(NotFoundError):
                lost[0].exec("true")


def test_a_dns_name_whose_records_are_the_nodes_makes_the_pool(cluster: Cluster) -> None:
    # `ip netns exec` (here only, for a client: it hides /sys/fs/cgroup) puts /etc/netns/NS/hosts over /etc/hosts
    etc = Path("/etc/netns") / cluster.net.ns("cli")
    made_parent = not etc.parent.exists()
    etc.mkdir(parents=True, exist_ok=True)
    try:
        (etc / "hosts").write_text("127.0.0.1 localhost\n" + "".join(f"{cluster.net.addr(n)} nodes.pool.test\n" for n in NODES))
        code = ("import json, minisandbox; p = minisandbox.Pool(dns='nodes.pool.test:7000', token_file=%r); "
                "print(json.dumps(sorted([n['url'], n['up']] for n in p.nodes())))" % cluster.token_file)
        r = subprocess.run(["ip", "netns", "exec", cluster.net.ns("cli"), "/usr/bin/python3", "-c", code], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": str(REPO / "clients/python/src")})
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == [[cluster.url(n), True] for n in NODES]
    finally:
        shutil.rmtree(etc, ignore_errors=True)
        if made_parent:
            with contextlib.suppress(OSError):  # another run's namespace may use it meanwhile
                etc.parent.rmdir()


def test_nothing_is_left_on_any_node_after_the_pool_closes(inside: Cluster) -> None:
    pool = inside.pool()
    made = [pool.create(tag) for tag in ENVS for _ in range(3)]
    made[0].fork(2)  # children made through the pool's handles are the pool's too
    sessions = [sb.session() for sb in made[:2]]
    assert sessions and len(pool.held()) == 11
    pool.close()
    for n in NODES:
        with inside.client(n) as c:
            assert c.list() == [], n
        left = os.listdir(inside.work / n / "store" / "sandboxes") if (inside.work / n / "store" / "sandboxes").exists() else []
        assert left == [], (n, left)

"""A real ``minisandbox serve`` for the whole session: a busybox environment imported from a
directory tree into a temporary registry (``minisandbox import``), a temporary store and token
file, the server on a free loopback port. Tests talk to it over HTTP only. The tests of grading
use a second server (``eval_server``), started only when one of them runs, that grades a dataset."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from minisandbox import Client, NotFoundError  # noqa: E402

REPO = HERE.parents[2]
BIN = REPO / "bin" / "minisandbox"
REF = "py/busybox"
EVAL_DATASET = "data"
EVAL_INSTANCE = "test__shlib-1"
ETC = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
    "etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
}


def busybox_root(target: Path) -> None:
    """A root filesystem of the host's static busybox: one symlink per applet, minimal /etc."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    applets = subprocess.run([busybox, "--list-full"], check=True, capture_output=True, text=True).stdout.split()
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "tmp", "var/tmp", "proc", "sys", "dev", "home", "run"):
        (target / d).mkdir(parents=True, exist_ok=True)
    for d, m in (("tmp", 0o1777), ("var/tmp", 0o1777), ("root", 0o700)):
        os.chmod(target / d, m)
    shutil.copyfile(busybox, target / "bin/busybox")
    os.chmod(target / "bin/busybox", 0o755)
    for a in applets:
        if a == "bin/busybox" or ".." in a or a.startswith("/"):
            continue
        link = target / a
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists() and not link.is_symlink():
            link.symlink_to(os.path.relpath(target / "bin/busybox", link.parent))
    for p, body in ETC.items():
        (target / p).write_text(body)


class Server:
    def __init__(self, url: str, token_file: str, proc: "subprocess.Popen[bytes]", work: Path) -> None:
        self.url = url
        self.token_file = token_file
        self.proc = proc
        self.work = work


@functools.lru_cache(maxsize=None)
def serve_takes(option: str) -> bool:
    """Whether this checkout's ``serve`` has ``option`` (options of the pool's server side land
    from another branch; tests that need them pass them only where they exist)."""
    out = subprocess.run([str(BIN), "serve", "--help"], capture_output=True, text=True, timeout=120).stdout
    return option in out


def node_name_args(name: str) -> List[str]:
    """``--node-name NAME`` where serve takes it (its sandbox ids then end in ``.NAME``)."""
    return ["--node-name", name] if serve_takes("--node-name") else []


@contextlib.contextmanager
def serving(cli: List[str], work: Path, *args: str, token_file: Optional[str] = None) -> Iterator[Server]:
    """``minisandbox serve`` on a free loopback port (with ``args``) until the block ends; the
    token in ``token_file`` (made if missing; default ``work/token``)."""
    token_file = token_file or str(work / "token")
    log = open(work / "serve.log", "wb")
    proc = subprocess.Popen(
        [*cli, "serve", "--listen", "127.0.0.1:0", "--token-file", token_file, *args],
        stdout=subprocess.PIPE,
        stderr=log,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # `{"listening": URL, "token_file": F}` once it is up
        if not line:
            raise RuntimeError(f"serve exited {proc.wait()}: {(work / 'serve.log').read_text()[-2000:]}")
        url = json.loads(line)["listening"]
        c = Client(url, token_file=token_file)
        assert c.health().get("ok") is True
        c.close()
        yield Server(url, token_file, proc, work)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def work_dir(prefix: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(work, 0o755)  # the sandboxes' subordinate ids must reach the store below it
    return work


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """A server of the busybox environment ``REF``, grading no dataset (no ``--eval-dataset``)."""
    work = work_dir("ms-pyclient-")
    reg, store = work / "registry", work / "store"
    root = work / "rootfs"
    busybox_root(root)
    cli = [str(BIN), "--registry", str(reg), "--store", str(store)]
    subprocess.run(
        [*cli, "--progress", "none", "import", str(root), "--tag", REF, "--workdir", "/root", "-e", "GREETING=hello"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    try:
        with serving(cli, work, "--max-sandboxes", "24", *node_name_args("main")) as srv:
            yield srv
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def small_server(server: Server) -> Iterator[Server]:
    """A second node over ``server``'s registry, with its own store, the same token and room for 3
    sandboxes: with ``server``, a pool of two nodes (one small enough for a group not to fit)."""
    work = work_dir("ms-pyclient-small-")
    cli = [str(BIN), "--registry", str(server.work / "registry"), "--store", str(work / "store")]
    try:
        with serving(cli, work, "--max-sandboxes", "3", *node_name_args("small"), token_file=server.token_file) as srv:
            yield srv
    finally:
        shutil.rmtree(work, ignore_errors=True)


# Host programs a grading root takes over busybox's: the eval script is bash, the apply chain and
# the diff are git, and the runner unpacks its files from one pipe with `head -c`, which must read
# exactly its count (busybox's reads ahead) and `dd`, whose byte count it reads (GNU's wording).
HOST_TOOLS = {"/bin/bash": "bin/bash", "/usr/bin/git": "usr/bin/git", "/usr/bin/head": "usr/bin/head", "/bin/dd": "bin/dd"}


def grading_root(target: Path, repo: Path, base_commit: str) -> None:
    """A root an eval script runs in: the busybox root with HOST_TOOLS and the shared libraries they
    load (as ldd names them), and ``repo`` at ``base_commit`` in /testbed, without a remote (as
    SWE-bench's images). A few MB, where a Debian root is 300: its import and the server's first
    pull of it take a second, not half a minute."""
    busybox_root(target)

    def put(src: str, rel: str) -> None:
        dest = target / rel.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink() or dest.exists():
            dest.unlink()  # a busybox applet link: copying onto it would overwrite busybox itself
        shutil.copyfile(os.path.realpath(src), dest)
        os.chmod(dest, 0o755)

    for binary, rel in HOST_TOOLS.items():
        put(binary, rel)
        for line in subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout.splitlines():
            lib = next((w for w in line.split() if w.startswith("/")), None)
            if lib is not None and not (target / lib.lstrip("/")).exists():
                put(lib, lib)
    git = ["git", "-c", "advice.detachedHead=false"]
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run([*git, "clone", "-q", "--no-checkout", str(repo), str(target / "testbed")], check=True, env=env)
    subprocess.run([*git, "checkout", "-q", base_commit], check=True, env=env, cwd=target / "testbed")
    subprocess.run([*git, "remote", "remove", "origin"], check=True, env=env, cwd=target / "testbed")


class EvalServer(Server):
    """A server that grades the dataset ``EVAL_DATASET``; ``rows`` by instance id."""

    rows: Dict[str, Dict[str, Any]]


@pytest.fixture(scope="session")
def eval_server() -> Iterator[EvalServer]:
    """A server grading the hermetic dataset recipes/test (a shell project, test/shlib; its rows in
    recipes/test/dataset.jsonl), the environment of ``EVAL_INSTANCE`` (``data/<instance_id>``) a
    grading root (see grading_root) imported into its registry. Started only when a test of grading
    runs."""
    work = work_dir("ms-pyclient-eval-")
    rows_file = REPO / "recipes" / "test" / "dataset.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    subprocess.run([str(REPO / "recipes" / "test" / "make-repo.sh"), str(work / "shlib")], check=True, capture_output=True, timeout=600)
    cli = [str(BIN), "--registry", str(work / "registry"), "--store", str(work / "store")]
    # the tests grade this instance only: the other has no environment (a create of it is a 404)
    row = next(r for r in rows if r["instance_id"] == EVAL_INSTANCE)
    grading_root(work / "root", work / "shlib", row["base_commit"])
    subprocess.run([*cli, "--progress", "none", "import", str(work / "root"), "--tag", f"{EVAL_DATASET}/{EVAL_INSTANCE}", "--workdir", "/testbed"],
                   check=True, capture_output=True, timeout=600)
    # the server reads the test command and log parser from the specs; the environments it grades
    # in are the registry's data/<instance_id>, imported above (`image` is never read by serve)
    specs = work / "specs.yaml"
    specs.write_text('defaults:\n  image: "oci:unused:{id}"\n  testCmd: sh run_tests.sh\n  logParser: pytest\n'
                     '  workdir: /testbed\nrepos:\n  test/shlib:\n    "1.0": {}\n')
    try:
        with serving(cli, work, "--max-sandboxes", "12", "--eval-dataset", f"{EVAL_DATASET}={rows_file},{specs}",
                     "--reports-dir", str(work / "reports")) as srv:
            out = EvalServer(srv.url, srv.token_file, srv.proc, work)
            out.rows = {r["instance_id"]: r for r in rows}
            yield out
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture()
def eval_client(eval_server: EvalServer) -> Iterator[Client]:
    c = Client(eval_server.url, token_file=eval_server.token_file)
    yield c
    c.close()


@pytest.fixture()
def client(server: Server) -> Iterator[Client]:
    c = Client(server.url, token_file=server.token_file)
    yield c
    c.close()


@pytest.fixture()
def sandbox(client: Client) -> Iterator["object"]:
    with client.create(REF) as sb:
        yield sb


def route_missing(client: Client, method: str, path: str) -> Tuple[bool, str]:
    """True (and why) when the server does not serve ``method path`` yet: no /v1/openapi.json, or
    the route is absent from it. Tests of routes other branches build skip on it until merged."""
    try:
        spec = client.openapi()
    except NotFoundError:
        return True, "the server has no /v1/openapi.json yet (routes being built on other branches)"
    paths = spec.get("paths", {})
    for p, ops in paths.items():
        norm = "/".join("{}" if seg.startswith("{") or seg.startswith(":") else seg for seg in p.split("/"))
        want = "/".join("{}" if seg.startswith("{") or seg.startswith(":") else seg for seg in path.split("/"))
        if norm == want and method.lower() in {k.lower() for k in ops}:
            return False, ""
    return True, f"the server does not serve {method} {path} yet"


@pytest.fixture()
def need(client: Client):  # type: ignore[no-untyped-def]
    """``need("POST", "/v1/sandboxes/{id}/snapshot")`` skips the test when the route is not served."""

    def check(method: str, path: str) -> None:
        missing, why = route_missing(client, method, path)
        if missing:
            pytest.skip(why)

    return check

"""A real ``minisandbox serve`` for the whole session: a busybox environment imported from a
directory tree into a temporary registry (``minisandbox import``), a temporary store and token
file, the server on a free loopback port. Tests talk to it over HTTP only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Tuple

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from minisandbox import Client, NotFoundError  # noqa: E402

REPO = HERE.parents[2]
BIN = REPO / "bin" / "minisandbox"
REF = "py/busybox"
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


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    work = Path(tempfile.mkdtemp(prefix="ms-pyclient-"))
    os.chmod(work, 0o755)  # the sandboxes' subordinate ids must reach the store below it
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
    token_file = str(work / "token")
    log = open(work / "serve.log", "wb")
    proc = subprocess.Popen(
        [*cli, "serve", "--listen", "127.0.0.1:0", "--token-file", token_file, "--max-sandboxes", "24"],
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
        shutil.rmtree(work, ignore_errors=True)


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

"""Hosts of their own on one machine: network namespaces joined by veth pairs to a bridge (in a
namespace of its own too, so nothing is added to the machine's own network), one private /24.

    with Hosts({"reg": 2, "n1": 11}) as net:       # host name -> last byte of its address
        net.addr("n1")                              # "10.231.0.11"
        net.popen("n1", [...])                      # a process on that host (nsenter --net)
        with net.inside("cli"): ...                 # this thread (and the threads it starts) there

Processes go in with ``nsenter --net`` rather than ``ip netns exec``: the latter also mounts a
fresh /sys for the namespace, which hides the cgroup hierarchies under /sys/fs/cgroup that the
sandboxes of ``serve`` are made in. Names carry a random tag, so two runs at once do not meet.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
from typing import Dict, Iterator, List, Optional

CLONE_NEWNET = 0x40000000
SUBNET = "10.231.0"


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


class Hosts:
    def __init__(self, hosts: Dict[str, int]) -> None:
        self.tag = secrets.token_hex(3)
        self.hosts = dict(hosts)
        self.lan = self.ns("lan")
        self.made: List[str] = []

    def ns(self, host: str) -> str:
        return f"ms{self.tag}-{host}"

    def addr(self, host: str) -> str:
        return f"{SUBNET}.{self.hosts[host]}"

    def up(self) -> "Hosts":
        """Makes the namespaces and the links (OSError, saying what failed, where the machine cannot)."""
        try:
            for name in [self.lan] + [self.ns(h) for h in self.hosts]:
                _ip("netns", "add", name)
                self.made.append(name)
                _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", self.lan, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.lan, "link", "set", "br0", "up")
            for i, (host, last) in enumerate(self.hosts.items()):
                port = f"p{i}"
                _ip("-n", self.lan, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", self.ns(host))
                _ip("-n", self.lan, "link", "set", port, "master", "br0", "up")
                _ip("-n", self.ns(host), "addr", "add", f"{SUBNET}.{last}/24", "dev", "eth0")
                _ip("-n", self.ns(host), "link", "set", "eth0", "up")
        except OSError:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Ends every process left in the namespaces (by pid: processes this test started, and
        theirs), then removes the namespaces."""
        for name in self.made:
            r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=60)
            for pid in r.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=60)
        self.made = []

    def __enter__(self) -> "Hosts":
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def argv(self, host: str, argv: List[str]) -> List[str]:
        return ["nsenter", f"--net=/run/netns/{self.ns(host)}", "--", *argv]

    def popen(self, host: str, argv: List[str], **kwargs: object) -> "subprocess.Popen[bytes]":
        return subprocess.Popen(self.argv(host, argv), **kwargs)  # type: ignore[call-overload,no-any-return]

    @contextlib.contextmanager
    def inside(self, host: str) -> Iterator[None]:
        """This thread on ``host`` for the block: its sockets, and those of the threads it starts
        meanwhile (a new thread takes its creator's namespaces), are that host's."""
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            _setns(f"/run/netns/{self.ns(host)}")
            try:
                yield
            finally:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(back, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back to the machine's network namespace failed")
        finally:
            os.close(back)


def can_make_namespaces() -> Optional[str]:
    """None where this machine lets the test make network namespaces, else why not."""
    probe = f"ms{secrets.token_hex(3)}-probe"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return f"`ip netns add` failed here ({r.stderr.strip() or r.returncode}): hosts of their own need root and iproute2"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=60)
    return None

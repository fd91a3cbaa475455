"""Errors are typed by the server's code and carry its message, hint and field; a 429 carries
Retry-After and a client can wait it out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from typing import Iterator

import pytest

from conftest import BIN, REF, Server
from minisandbox import CapacityError, Client, InvalidInputError, MinisandboxError, NotFoundError, UnauthorizedError


def test_422_names_the_field(client: Client) -> None:
    with pytest.raises(InvalidInputError) as e:
        client.create(REF, limits={"memory": "lots"})
    assert (e.value.status, e.value.code, e.value.field) == (422, "INVALID_INPUT", "limits.memory")
    assert e.value.hint and "limits.memory" in str(e.value)


def test_a_create_without_a_source_names_ref(client: Client) -> None:
    with pytest.raises(InvalidInputError) as e:
        client.create()
    assert e.value.field == "ref"


def test_404_for_a_missing_sandbox_and_ref(client: Client) -> None:
    with pytest.raises(NotFoundError) as e:
        client.sandbox("sb-nope").exec("true")
    assert (e.value.status, e.value.code, e.value.missing_route) == (404, "NOT_FOUND", False)
    with pytest.raises(NotFoundError):
        client.create("no/such-env")


def test_401_for_a_wrong_token(server: Server) -> None:
    bad = Client(server.url, token="x" * 32)
    with pytest.raises(UnauthorizedError) as e:
        bad.list()
    assert e.value.status == 401 and isinstance(e.value, MinisandboxError)


def test_token_from_the_environment(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINISANDBOX_TOKEN_FILE", server.token_file)
    monkeypatch.delenv("MINISANDBOX_TOKEN", raising=False)
    assert Client(server.url).health()["ok"] is True
    with open(server.token_file) as f:
        monkeypatch.setenv("MINISANDBOX_TOKEN", f.read().strip())
    monkeypatch.delenv("MINISANDBOX_TOKEN_FILE")
    assert Client(server.url).health()["ok"] is True


@pytest.fixture()
def small_server(server: Server) -> Iterator[str]:
    """A second server over the same registry that holds one sandbox at most."""
    work = server.work
    proc = subprocess.Popen(
        [str(BIN), "--registry", str(work / "registry"), "--store", str(work / "store-small"), "serve",
         "--listen", "127.0.0.1:0", "--token-file", server.token_file, "--max-sandboxes", "1",
         # Retry-After is the time until a sandbox may idle out: short here, so the retry is quick
         "--idle-timeout", "5s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        yield json.loads(proc.stdout.readline())["listening"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def test_429_carries_retry_after_and_retry_on_capacity_waits_for_a_slot(server: Server, small_server: str) -> None:
    c = Client(small_server, token_file=server.token_file)
    first = c.create(REF)
    with pytest.raises(CapacityError) as e:
        c.create(REF)
    assert e.value.status == 429 and e.value.retry_after is not None and e.value.retry_after >= 1

    patient = Client(small_server, token_file=server.token_file, retry_on_capacity=300)
    timer = threading.Timer(0.5, first.delete)
    timer.start()
    try:
        with patient.create(REF) as second:
            assert second.exec("echo in").stdout == "in\n"
    finally:
        timer.join()
    assert c.list() == []


def test_a_failed_diff_is_typed_with_the_servers_hint(sandbox) -> None:  # type: ignore[no-untyped-def]
    # the busybox environment has no git: the server says so, and the client keeps code and hint
    with pytest.raises(InvalidInputError) as e:
        sandbox.diff()
    assert e.value.code == "DIFF_FAILED" and e.value.hint and "git" in e.value.hint

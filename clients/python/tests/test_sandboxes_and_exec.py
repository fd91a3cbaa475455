"""Sandboxes over the sync client: create, exec (shell string and argv), info, list, delete."""

from __future__ import annotations

import pytest

from conftest import REF
from minisandbox import Client, ExecResult, NotFoundError, CommandError


def test_create_exec_delete(client: Client) -> None:
    sb = client.create(REF, env={"EXTRA": "x1"}, limits={"memory": "256m", "pids": 64})
    try:
        assert sb.created is not None and sb.created.ref == REF
        assert sb.id in [s.id for s in client.list()]
        assert client.get(sb.id).created.id == sb.id  # type: ignore[union-attr]

        r = sb.exec('echo "$GREETING $EXTRA $(pwd)"; echo err >&2; exit 3')
        assert isinstance(r, ExecResult)
        assert (r.stdout, r.stderr, r.exit_code, r.outcome, r.ok) == ("hello x1 /root\n", "err\n", 3, "ok", False)
        with pytest.raises(CommandError) as e:
            r.check()
        assert e.value.result is r

        a = sb.exec(["/bin/sh", "-c", 'echo "$1 $V"; pwd', "sh", "a b"], cwd="/tmp", env={"V": "v"})
        assert (a.stdout, a.ok) == ("a b v\n/tmp\n", True)
        assert sb.exec("sleep 30", timeout=0.5).outcome == "timeout"
        big = sb.exec("yes | head -c 5000", max_output=100)
        assert big.stdout_truncated and big.outcome == "ok"
        assert sb.is_alive()
    finally:
        sb.delete()
    assert not sb.is_alive()
    with pytest.raises(NotFoundError):
        client.info(sb.id)
    with pytest.raises(NotFoundError):
        sb.exec("true")
    sb.delete(missing_ok=True)  # a second delete is a no-op when asked


def test_sequential_requests_reuse_one_connection(client: Client, sandbox) -> None:  # type: ignore[no-untyped-def]
    for _ in range(5):
        assert sandbox.exec("true").ok
    # one keep-alive connection served them all and went back to the pool
    assert len(client.transport._idle) == 1


def test_health_and_capacity(client: Client, sandbox) -> None:  # type: ignore[no-untyped-def]
    assert client.health()["ok"] is True
    cap = client.capacity()
    assert cap.max == 24 and cap.live >= 1

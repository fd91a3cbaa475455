"""Sessions: a persistent shell whose cwd and exported variables carry over; a timeout or an
interrupt ends the command and keeps the shell."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from minisandbox import InvalidInputError, NotFoundError, RemoteSandbox


def test_session_keeps_cwd_and_exported_variables(sandbox: RemoteSandbox) -> None:
    with sandbox.session(["mkdir -p /work/proj", "cd /work/proj"]) as s:
        assert s.run("export TOKEN_X=42; mkdir -p sub && cd sub").ok
        r = s.run('echo "$TOKEN_X $(pwd)"')
        assert (r.stdout, r.outcome) == ("42 /work/proj/sub\n", "ok")
        assert s.run("sleep 30", timeout=0.5).outcome == "timeout"
        assert s.run("echo $TOKEN_X").stdout == "42\n"
        # a one-shot exec is a fresh process: none of the session's state
        assert sandbox.exec('echo "[$TOKEN_X]"').stdout == "[]\n"
        assert s.id in sandbox.info().sessions
    with pytest.raises(NotFoundError):
        s.run("true")
    assert s.id not in sandbox.info().sessions


def sleep_runs(marker: str) -> bool:
    """The sandbox's processes are host processes: find the sleep by its unique command line."""
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if f.read() == f"sleep\0{marker}\0".encode():
                        return True
            except OSError:
                pass
    return False


def test_interrupt_ends_the_running_command_and_keeps_the_shell(sandbox: RemoteSandbox) -> None:
    s = sandbox.session()
    s.run("export KEEP=1")
    marker = str(600_000 + random.randrange(99_999))
    out: list = []
    t = threading.Thread(target=lambda: out.append(s.run(f"sleep {marker}")))
    t.start()
    # interrupt once the sleep runs: before, the shell itself would be the one to get it
    deadline = time.monotonic() + 120
    while not sleep_runs(marker):
        assert time.monotonic() < deadline, "the sleep never started"
        time.sleep(0.05)
    s.interrupt()
    t.join(timeout=120)
    assert out and out[0].outcome == "ok" and out[0].exit_code == 130
    assert s.run("echo $KEEP").stdout == "1\n"
    s.close()


def test_a_failing_startup_command_is_a_typed_422(sandbox: RemoteSandbox) -> None:
    with pytest.raises(InvalidInputError) as e:
        sandbox.session(["cd /no/such/dir"])
    assert e.value.status == 422 and "startup command failed" in e.value.message

"""The rllm-style ``Sandbox``: exec returns stdout and raises on failure; files and trees go up;
read_file; is_alive and close; evaluate raises what ``Client.evaluate`` raises."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import REF
from minisandbox import Client, NotConfiguredError
from minisandbox.adapters import Sandbox, SandboxCommandError


def test_sandbox_adapter(client: Client, tmp_path: Path) -> None:
    sb = Sandbox(REF, name="rollout-1", client=client)
    try:
        assert sb.name == "rollout-1" and sb.is_alive()
        assert sb.exec("echo hi; echo warn >&2") == "hi\n"
        with pytest.raises(RuntimeError) as e:
            sb.exec("echo bad >&2; exit 2")
        assert isinstance(e.value, SandboxCommandError) and e.value.result.exit_code == 2 and "bad" in str(e.value)
        with pytest.raises(SandboxCommandError):
            sb.exec("sleep 30", timeout=0.5)

        f = tmp_path / "agent.py"
        f.write_text("print(1)\n")
        os.chmod(f, 0o700)
        sb.upload_file(str(f), "/opt/agent/agent.py")
        assert sb.read_file("/opt/agent/agent.py") == "print(1)\n"
        assert sb.exec("stat -c %a /opt/agent/agent.py") == "700\n"

        tree = tmp_path / "task"
        (tree / "tests").mkdir(parents=True)
        (tree / "tests" / "test.sh").write_text("echo 1.0 > /logs/reward.txt\n")
        sb.upload_dir(str(tree), "/task/")
        sb.exec("mkdir -p /logs && sh /task/tests/test.sh")
        assert sb.read_file("/logs/reward.txt") == "1.0\n"
        assert sb.read_file("/logs/reward.txt", binary=True) == b"1.0\n"
    finally:
        sb.close()
    assert not sb.is_alive()
    sb.close()  # idempotent
    assert sb.id not in [s.id for s in client.list()]


def test_attach_wraps_a_fork_child(client: Client) -> None:
    with client.create(REF) as parent:
        parent.write_file("/w/state", "parent\n")
        (child,) = parent.fork(1)
        assert child.sandbox is not None
        with Sandbox.attach(child.sandbox) as sb:
            assert sb.read_file("/w/state") == "parent\n"
        assert not child.sandbox.is_alive()


def test_evaluate_raises_when_the_server_grades_no_dataset(client: Client) -> None:
    with Sandbox(REF, client=client) as sb, pytest.raises(NotConfiguredError):
        sb.evaluate("diff --git a/x b/x\n", dataset="data", instance_id="test__shlib-1")
    with Sandbox(REF, client=client) as sb, pytest.raises(ValueError):
        sb.evaluate("x")  # made from a ref: which instance would it be graded for?

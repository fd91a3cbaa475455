"""mini-swe-agent's environment contract: built as ``cls(**config)``; ``execute(command, cwd="",
*, timeout=None)`` returns ``{"output", "returncode"}`` (stderr merged in order); v1 raises
subprocess.TimeoutExpired on a timeout, v2 (an action dict) returns ``exception_info``;
``get_template_vars`` and ``serialize`` expose the config (never the token); ``cleanup`` deletes
the sandbox it made; ``evaluate`` grades its changes for its instance, as ``Client.evaluate``."""

from __future__ import annotations

import subprocess

import pytest

from conftest import EVAL_DATASET, EVAL_INSTANCE, REF, EvalServer, Server
from minisandbox import Client
from minisandbox.adapters import MinisandboxEnvironment


def make(server: Server, **kw) -> MinisandboxEnvironment:  # type: ignore[no-untyped-def]
    config = {"environment_class": "minisandbox.adapters.minisweagent.MinisandboxEnvironment", "ref": REF,
              "base_url": server.url, "token_file": server.token_file, "interpreter": ["sh", "-c"], **kw}
    config.pop("environment_class")  # as mini-swe-agent's get_environment does
    return MinisandboxEnvironment(**config)


def test_execute_contract(server: Server, client: Client) -> None:
    env = make(server, cwd="/tmp", env={"MY_VAR": "v1"}, timeout=30)
    sid = env.sandbox.id  # type: ignore[union-attr]
    try:
        out = env.execute("echo out; echo err >&2; echo out2; exit 4")
        assert out == {"output": "out\nerr\nout2\n", "returncode": 4}
        assert env.execute("pwd")["output"] == "/tmp\n"
        assert env.execute("pwd", cwd="/root")["output"] == "/root\n"
        assert env.execute("echo $MY_VAR")["output"] == "v1\n"
        # files persist between commands; the shell does not (as with docker exec)
        env.execute("echo kept > /tmp/f; export GONE=1")
        assert env.execute("cat /tmp/f; echo [$GONE]")["output"] == "kept\n[]\n"

        with pytest.raises(subprocess.TimeoutExpired) as e:
            env.execute("echo partial; sleep 30", timeout=1)
        assert e.value.output == b"partial\n"

        v2 = env.execute({"command": "echo hi"})
        assert v2 == {"output": "hi\n", "returncode": 0, "exception_info": ""}
        t = env.execute({"command": "sleep 30"}, timeout=1)
        assert t["returncode"] == -1 and "timed out" in t["exception_info"]

        tv = env.get_template_vars(extra="x")
        assert tv["cwd"] == "/tmp" and tv["extra"] == "x" and tv["sandbox_id"] == sid and "system" in tv
        assert "token" not in tv and "token" not in env.serialize()["info"]["config"]["environment"]
        assert env.serialize()["info"]["config"]["environment_type"].endswith("MinisandboxEnvironment")
    finally:
        env.cleanup()
    assert sid not in [s.id for s in client.list()]


def test_attaching_to_an_existing_sandbox_leaves_it(server: Server, client: Client) -> None:
    with client.create(REF) as sb:
        env = make(server, ref=None, sandbox_id=sb.id)
        assert env.execute("echo attached")["output"] == "attached\n"
        env.cleanup()
        assert sb.is_alive()


def test_evaluate_grades_the_sandboxs_changes_for_its_instance(eval_server: EvalServer) -> None:
    env = make(eval_server, ref=None, dataset=EVAL_DATASET, instance_id=EVAL_INSTANCE, cwd="/testbed", interpreter=["bash", "-c"])
    try:
        fix = eval_server.rows[EVAL_INSTANCE]["patch"]
        assert env.execute(f"git apply <<'EOF'\n{fix}EOF")["returncode"] == 0
        ev = env.evaluate()  # the submission: the repository's diff
        assert (ev.status, ev.resolved, ev.reward) == ("completed", True, 1.0)
    finally:
        env.cleanup()
    with pytest.raises(ValueError):
        make(eval_server, ref=None, sandbox_id="sb-none").evaluate("x")  # attached: no instance to grade for

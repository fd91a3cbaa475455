"""GRPO over forks: one prepared sandbox, N children running the policy at once, one reward each,
everything deleted at the end. A reward that could not be computed (the policy or the grading
failed, the server grades no dataset, a sandbox was lost) is never a 0: the group raises, or with
``on_error="skip"`` that rollout's reward and advantage are None and its status says why."""

from __future__ import annotations

from typing import Optional

import pytest

from conftest import EVAL_DATASET, EVAL_INSTANCE, REF, EvalServer
from minisandbox import Client, EvaluationError, NotConfiguredError, NotFoundError, RemoteSandbox, Session
from minisandbox.adapters import GroupError, run_group, swebench_reward


def test_group_rewards_from_forks(client: Client) -> None:
    def prepare(parent: RemoteSandbox) -> None:
        parent.write_file("/task/start", "prepared\n")

    def policy(sb: RemoteSandbox, i: int, _s: Optional[Session]) -> str:
        if i == 2:
            raise ValueError("policy blew up")
        # each child sees the prepared state and writes its own answer, unseen by its siblings
        r = sb.exec(f"cat /task/start; ls /task; echo {i} > /task/answer")
        return r.stdout

    def reward(sb: RemoteSandbox, output: str) -> float:
        return float(sb.read_text("/task/answer").strip()) + (0.5 if output == "prepared\nstart\n" else 0.0)

    # a failed rollout gets the reward the trainer names for it, and still says it failed
    g = run_group(client, ref=REF, n=4, prepare=prepare, policy=policy, reward=reward, on_error=-1.0)
    assert g.rewards == [0.5, 1.5, -1.0, 3.5]
    assert g.errors[2] == "ValueError: policy blew up" and g.errors[:2] == [None, None]
    assert g.statuses == ["ok", "ok", "policy_error", "ok"] and [r.index for r in g.failed] == [2]
    assert [r.index for r in g.rollouts] == [0, 1, 2, 3]
    adv = g.advantages()
    assert abs(sum(adv)) < 1e-9 and adv[3] == max(adv)
    assert client.list() == []


def test_group_needs_a_reward(client: Client) -> None:
    with pytest.raises(ValueError):
        run_group(client, ref=REF, n=2, policy=lambda sb, i, s: None)


def test_group_with_a_session_carried_into_each_child(client: Client, need) -> None:  # type: ignore[no-untyped-def]
    need("POST", "/v1/sandboxes/{id}/snapshot")  # fork with `session` lands with snapshot/reset

    def policy(sb: RemoteSandbox, i: int, s: Optional[Session]) -> str:
        assert s is not None
        return s.run('echo "$PHASE $(pwd)"').stdout

    g = run_group(
        client, ref=REF, n=2, session_startup=["mkdir -p /repo", "cd /repo", "export PHASE=rollout"], policy=policy,
        reward=lambda sb, out: 1.0 if out == "rollout /repo\n" else 0.0,
    )
    assert g.rewards == [1.0, 1.0], g.errors


def test_a_reward_that_cannot_be_computed_is_never_a_zero(client: Client) -> None:
    # this server grades no dataset: every evaluate fails, so no rollout has a reward
    def graded(sb: RemoteSandbox, patch: str) -> float:
        return client.evaluate(EVAL_DATASET, EVAL_INSTANCE, patch).reward

    with pytest.raises(GroupError) as e:
        run_group(client, ref=REF, n=2, policy=lambda sb, i, s: "diff", reward=graded)
    group = e.value.group
    assert group.rewards == [None, None] and group.statuses == ["reward_error", "reward_error"]
    assert all(isinstance(r.exception, NotConfiguredError) for r in group.rollouts)
    assert "2 of 2 rollouts have no reward" in str(e.value) and "NOT_CONFIGURED" in str(e.value)
    assert client.list() == []

    # skip: the rollouts that have a reward are normalised among themselves; a lost sandbox has none
    def policy(sb: RemoteSandbox, i: int, _s: Optional[Session]) -> int:
        if i == 1:
            sb.delete()
        return i

    g = run_group(client, ref=REF, n=3, policy=policy, reward=lambda sb, i: float(sb.exec("echo " + str(i)).stdout), on_error="skip")
    assert g.rewards == [0.0, None, 2.0]
    assert g.statuses == ["ok", "reward_error", "ok"] and isinstance(g.rollouts[1].exception, NotFoundError)
    adv = g.advantages()
    assert adv[1] is None and adv[0] is not None and adv[2] is not None and abs(adv[0] + adv[2]) < 1e-9 and adv[2] > 0
    assert client.list() == []

    with pytest.raises(ValueError):
        run_group(client, ref=REF, n=1, policy=lambda sb, i, s: None, reward=lambda sb, o: 0.0, on_error="ignore")


def test_group_graded_by_the_server_marks_a_grading_that_timed_out(eval_server: EvalServer, eval_client: Client) -> None:
    patch = eval_server.rows[EVAL_INSTANCE]["patch"]
    added = next(line for line in patch.splitlines() if line.startswith("+max()"))
    sleepy = patch.replace(added, "+max() { sleep 600; }")

    def policy(sb: RemoteSandbox, i: int, _s: Optional[Session]) -> None:
        # child 0 submits the fix, child 1 one whose tests never end
        sb.write_file("/tmp/answer.diff", patch if i == 0 else sleepy)
        sb.exec(["git", "apply", "/tmp/answer.diff"], cwd="/testbed").check()

    reward = swebench_reward(eval_client, EVAL_DATASET, EVAL_INSTANCE, workdir="/testbed", timeout="2s")
    g = run_group(eval_client, dataset=EVAL_DATASET, instance_id=EVAL_INSTANCE, n=2, policy=policy, reward=reward, on_error="skip")
    assert g.rewards == [1.0, None], g.errors
    bad = g.rollouts[1]
    assert bad.status == "reward_error" and isinstance(bad.exception, EvaluationError)
    assert bad.exception.evaluation.status == "timeout"
    assert g.advantages() == [0.0, None]
    assert eval_client.list() == []

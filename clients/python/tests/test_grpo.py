"""GRPO over forks: one prepared sandbox, N children running the policy at once, one reward each,
everything deleted at the end."""

from __future__ import annotations

from typing import Optional

import pytest

from conftest import REF
from minisandbox import Client, RemoteSandbox, Session
from minisandbox.adapters import run_group


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

    g = run_group(client, ref=REF, n=4, prepare=prepare, policy=policy, reward=reward, failure_reward=-1.0)
    assert g.rewards == [0.5, 1.5, -1.0, 3.5]
    assert g.errors[2] == "ValueError: policy blew up" and g.errors[:2] == [None, None]
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

"""GRPO rollouts over forks: prepare one sandbox (the task's start state), fork it into a group of N,
run the policy in each child at once, score each child, destroy them all, and return the rewards
(and the group-relative advantages GRPO trains on).

    group = run_group(client, ref="swe/astropy-12907", n=8, policy=agent,
                      dataset="swe-bench-lite", instance_id="astropy__astropy-12907")
    group.rewards        # [1.0, 0.0, ...]: each child's diff graded by POST /v1/evaluate
    group.advantages()   # (r - mean) / (std + eps)
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, List, Optional, TypeVar

from ..client import Client, ForkChild, RemoteSandbox, Session

T = TypeVar("T")


@dataclass
class Rollout(Generic[T]):
    """One child of the group: its index, what the policy returned, its reward, and any error."""

    index: int
    sandbox_id: Optional[str]
    output: Optional[T] = None
    reward: float = 0.0
    error: Optional[str] = None


@dataclass
class GroupResult(Generic[T]):
    rollouts: List[Rollout[T]] = field(default_factory=list)

    @property
    def rewards(self) -> List[float]:
        return [r.reward for r in self.rollouts]

    @property
    def errors(self) -> List[Optional[str]]:
        return [r.error for r in self.rollouts]

    def advantages(self, eps: float = 1e-6) -> List[float]:
        """GRPO's group-relative advantages: each reward less the group mean, over the group's std."""
        rs = self.rewards
        if not rs:
            return []
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / len(rs))
        return [(r - mean) / (std + eps) for r in rs]


Policy = Callable[[RemoteSandbox, int, Optional[Session]], T]
Reward = Callable[[RemoteSandbox, T], float]


def swebench_reward(client: Client, dataset: str, instance_id: str, *, workdir: Optional[str] = None) -> Reward[Any]:
    """A reward: the child's diff graded by the server (1.0 when resolved, else 0.0)."""

    def reward(sb: RemoteSandbox, _output: Any) -> float:
        patch = sb.diff(workdir=workdir)
        return 1.0 if client.evaluate(dataset, instance_id, patch).resolved else 0.0

    return reward


def run_group(
    client: Client,
    *,
    n: int,
    policy: Policy[T],
    reward: Optional[Reward[T]] = None,
    ref: Optional[str] = None,
    dataset: Optional[str] = None,
    instance_id: Optional[str] = None,
    snapshot: Optional[str] = None,
    prepare: Optional[Callable[[RemoteSandbox], None]] = None,
    session_startup: Optional[List[str]] = None,
    failure_reward: float = 0.0,
    max_workers: Optional[int] = None,
    **create_kwargs: Any,
) -> GroupResult[T]:
    """One GRPO group. ``prepare(parent)`` sets the start state once; each of the ``n`` forks runs
    ``policy(child, index, session)`` (``session`` when ``session_startup`` is given: a shell in the
    parent's cwd with its exported variables, carried into each child) and is scored by
    ``reward(child, output)`` (default: its diff graded for ``dataset``/``instance_id``). A child that
    could not be forked, or whose policy or reward raised, gets ``failure_reward`` and its ``error``.
    Every sandbox, parent and children, is deleted before this returns."""
    if reward is None:
        if dataset is None or instance_id is None:
            raise ValueError("give a reward function, or dataset and instance_id to grade each child's diff")
        reward = swebench_reward(client, dataset, instance_id)
    score = reward
    children: List[ForkChild] = []
    with client.create(ref, dataset=dataset if ref is None and snapshot is None else None,
                       instance_id=instance_id if ref is None and snapshot is None else None,
                       snapshot=snapshot, **create_kwargs) as parent:
        try:
            if prepare is not None:
                prepare(parent)
            session = parent.session(session_startup) if session_startup is not None else None
            children = parent.fork(n, session=session)

            def one(i: int, c: ForkChild) -> Rollout[T]:
                if c.sandbox is None:
                    return Rollout(i, None, reward=failure_reward, error=f"fork: {c.error.code if c.error else '?'}: {c.error.message if c.error else ''}")
                ro: Rollout[T] = Rollout(i, c.sandbox.id)
                try:
                    ro.output = policy(c.sandbox, i, c.session)
                    ro.reward = float(score(c.sandbox, ro.output))
                except Exception as e:  # one child's failure is its reward, not the group's
                    ro.reward, ro.error = failure_reward, f"{type(e).__name__}: {e}"
                finally:
                    c.sandbox.delete(missing_ok=True)
                return ro

            with ThreadPoolExecutor(max_workers=max_workers or max(1, n)) as pool:
                rollouts = list(pool.map(lambda ic: one(*ic), enumerate(children)))
        finally:
            for c in children:
                if c.sandbox is not None:
                    c.sandbox.delete(missing_ok=True)
    return GroupResult(rollouts)
